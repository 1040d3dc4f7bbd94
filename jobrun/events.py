"""The transition log: which event a change of a job is, and which events a mode keeps.

Every change of a row of ``jobs`` is recorded by triggers (migration 0017) in the statement
that makes it, so an event commits or rolls back with its change. The triggers read what a
change was from the old and new row alone (and, for an attempt that ended, the outcome the
same statement recorded in ``job_attempts``); :func:`kind` is the same rule in Python, and
``event_kind`` in SQL is checked against it (tests/unit/test_events.py, tests/db/).

::

    insert ─────────────────────────────────────────────> enqueued
    status moves   queued ─> leased                        claimed
                   leased ─> succeeded | dead | cancelled  that status (the terminal events)
                   leased ─> queued, by the attempt's outcome:
                             released ───────────────────> released   (a stop, a neighbour's kill)
                             lease_expired ──────────────> reaped     (its holder went silent)
                             any other ──────────────────> retried    (run_at, delay)
                             no attempt recorded ────────> given_back (a claim undone: unclaim)
                   dead | cancelled ─> queued | waiting ─> requeued   (jobrun retry)
                   waiting ─> queued ────────────────────> ready      (its parents settled)
                   queued ─> cancelled ──────────────────> cancelled
    status stays   leased, attempts grow ────────────────> started
                   cancel asked of a leased job ─────────> cancel_requested
                   version moves (a change a user sees) ─> changed
    any other status move (none today) ──────────────────> changed
                   anything else (heartbeat, aging) ─────> nothing

A master that finds it lost a lease writes ``lease_lost`` itself: that changes no row.

The mode (``jobrun events mode``, settings row ``job_events``): ``all`` (the default) keeps
every event, ``terminal`` only succeeded, dead and cancelled, ``none`` nothing.
"""

from __future__ import annotations

from jobrun.errors import InvalidInput
from jobrun.states import Outcome, Status, TERMINAL


class Kind:
    ENQUEUED = "enqueued"
    CLAIMED = "claimed"
    STARTED = "started"
    CANCEL_REQUESTED = "cancel_requested"
    CHANGED = "changed"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"
    RETRIED = "retried"
    RELEASED = "released"
    REAPED = "reaped"
    GIVEN_BACK = "given_back"
    REQUEUED = "requeued"
    LEASE_LOST = "lease_lost"
    READY = "ready"


KINDS = (Kind.ENQUEUED, Kind.CLAIMED, Kind.STARTED, Kind.CANCEL_REQUESTED, Kind.CHANGED,
         Kind.SUCCEEDED, Kind.DEAD, Kind.CANCELLED, Kind.RETRIED, Kind.RELEASED, Kind.REAPED,
         Kind.GIVEN_BACK, Kind.REQUEUED, Kind.LEASE_LOST, Kind.READY)
# The events that end a job: one per finish, kept by the modes all and terminal.
TERMINAL_KINDS = (Kind.SUCCEEDED, Kind.DEAD, Kind.CANCELLED)

MODES = ("none", "terminal", "all")  # the settings row holds the index: 0, 1, 2
DEFAULT_MODE = "all"


def level(mode: str) -> int:
    """The settings value of ``mode``; one clear line for anything else."""
    if mode not in MODES:
        raise InvalidInput(f"invalid events mode {mode!r}: one of {', '.join(MODES)}")
    return MODES.index(mode)


def mode_of(value: int | None) -> str:
    """The mode a settings value stands for (no row: the default)."""
    if value is None:
        return DEFAULT_MODE
    return MODES[max(0, min(len(MODES) - 1, int(value)))]


def kind(old_status: str | None, new_status: str, outcome: str | None = None, *,
         attempts_up: bool = False, cancel_asked: bool = False,
         version_moved: bool = False) -> str | None:
    """The event a change of a job is (None: nothing to record). ``old_status`` None is an
    insert; ``outcome`` is that of the attempt the change ended (None: none was recorded)."""
    if old_status is None:
        return Kind.ENQUEUED
    if old_status == new_status:
        if new_status == Status.LEASED and attempts_up:
            return Kind.STARTED
        if cancel_asked:
            return Kind.CANCEL_REQUESTED
        return Kind.CHANGED if version_moved else None
    if new_status == Status.LEASED:
        return Kind.CLAIMED
    if new_status in TERMINAL:
        return new_status
    if old_status == Status.LEASED:
        if outcome is None:
            return Kind.GIVEN_BACK
        if outcome == Outcome.RELEASED:
            return Kind.RELEASED
        if outcome == Outcome.LEASE_EXPIRED:
            return Kind.REAPED
        return Kind.RETRIED
    if old_status in (Status.DEAD, Status.CANCELLED):
        return Kind.REQUEUED
    if old_status == Status.WAITING and new_status == Status.QUEUED:
        return Kind.READY
    return Kind.CHANGED  # a move the log has no name for: a new status adds its own


def kept(event_kind: str, mode: str) -> bool:
    """Whether ``mode`` keeps an event of ``event_kind``."""
    if mode == "all":
        return True
    return mode == "terminal" and event_kind in TERMINAL_KINDS
