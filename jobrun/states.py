"""A job's statuses, an attempt's outcomes and the moves between statuses: the one definition.

::

    enqueue after parents ──> waiting ── last parent settled (in its transaction) ──┐
                               │  └── a parent ended dead/cancelled ──> cancelled  │
                               v                                                   v
                    claim                       attempt ended (finish_jobs)
    enqueue ──> queued ─────> leased ──────────────────────> succeeded
                 │ ^ ^          │ ├─────────────────────────> dead ───────┐
                 │ │ │          │ ├─────────────────────────> cancelled ──┤
                 │ │ └──────────┘ queued again: a retry after            │ retry
                 │ │              backoff, a release at shutdown,        │ (by hand)
                 │ │              a job given back unstarted             │
                 │ └─────────────────────────────────────────────────────┘
                 └── cancel ──> cancelled

* **queued**: waiting to run; with ``run_at`` in the future it is shown as *scheduled*
  (not a status of its own: the claim simply does not reach it yet).
* **leased**: claimed by a master, its ``lease_token`` bumped (the fencing token). Cancel
  of a leased job only sets ``cancel_requested``: the holder stops it and the attempt ends.
* **succeeded**, **dead** (attempts or crashes spent, or a permanent failure) and
  **cancelled** are finished: ``finished_at`` is set, retention purges them, and only
  dead and cancelled ones can be put back to queued (``jobrun retry``).

Every move out of ``leased`` (a completion batch of the master, a transactional handler's
commit, the reaper's expired lease) goes through the SQL function ``finish_jobs`` (migration
0014), which refuses any other target: it releases the lease's limits and records the
attempt with its outcome. A leased job going back unstarted (``unclaim``) is the claim
undone, not an attempt: its attempt is not counted and no attempt row is written. A queued
job that is cancelled holds no lease, ran no attempt, and so has nothing to release.

* **waiting**: enqueued after other jobs (its parents: ``after=``, a workflow) that have
  not all settled. It becomes queued in the transaction that settles its last parent, or
  cancelled (with ``cancel_reason``) when a parent ends dead or cancelled, unless it was
  enqueued with ``on_parent_failure='run'``; retrying that parent brings it back to waiting.
  Those moves are made (migration 0019) by ``finish_jobs`` for a lease's end (it hands the
  parents of its batch to ``settle_batch`` in its own statement) and by the trigger
  ``settle_dependents`` for any other move of a parent (a cancel, a retry), so whatever
  changes a parent's status settles its dependents in its own transaction, and a fenced
  attempt, which changes nothing, settles nothing. A waiting job can be cancelled like a
  queued one.

The SQL domain ``job_status``, the ``outcome_valid`` check of ``job_attempts`` and the
predicates of the partial indexes that name statuses or outcomes are checked against this
module by tests/db/test_states.py.
"""

from __future__ import annotations

from types import MappingProxyType


class Status:
    """The values of ``jobs.status`` (the ``job_status`` domain)."""

    WAITING = "waiting"
    QUEUED = "queued"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"


class Outcome:
    """The values of ``job_attempts.outcome``: how one attempt ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"              # the handler raised
    RETRY = "retry"                # the handler asked for a retry (jobrun.Retry)
    TIMEOUT = "timeout"            # a time limit was exceeded
    WORKER_LOST = "worker_lost"    # the child died (signal, OOM, os._exit): a crash
    LEASE_EXPIRED = "lease_expired"  # its holder stopped renewing the lease (the reaper)
    CANCELLED = "cancelled"        # stopped on a cancel request
    RELEASED = "released"          # cut short by the master (shutdown, a neighbour's kill)


STATUSES = (Status.WAITING, Status.QUEUED, Status.LEASED, Status.SUCCEEDED, Status.DEAD, Status.CANCELLED)
# Finished: set finished_at; purged by retention; the only ones that can be deleted.
TERMINAL = (Status.SUCCEEDED, Status.DEAD, Status.CANCELLED)
OUTCOMES = (Outcome.SUCCEEDED, Outcome.FAILED, Outcome.RETRY, Outcome.TIMEOUT,
            Outcome.WORKER_LOST, Outcome.LEASE_EXPIRED, Outcome.CANCELLED, Outcome.RELEASED)
# Attempts that went wrong, as the recent-failures views show them (not a retry the handler
# asked for, nor a cancel or a release).
FAILURES = (Outcome.FAILED, Outcome.TIMEOUT, Outcome.WORKER_LOST, Outcome.LEASE_EXPIRED)

TRANSITIONS: MappingProxyType[str, frozenset[str]] = MappingProxyType({
    Status.WAITING: frozenset({Status.QUEUED, Status.CANCELLED}),
    Status.QUEUED: frozenset({Status.LEASED, Status.CANCELLED}),
    Status.LEASED: frozenset({Status.SUCCEEDED, Status.QUEUED, Status.DEAD, Status.CANCELLED}),
    Status.SUCCEEDED: frozenset(),
    Status.DEAD: frozenset({Status.QUEUED, Status.WAITING}),
    Status.CANCELLED: frozenset({Status.QUEUED, Status.WAITING}),
})
# Where an attempt can leave its job: the targets finish_jobs accepts.
FINISHES = TRANSITIONS[Status.LEASED]


def allowed(old: str, new: str) -> bool:
    """Whether a job may move from status ``old`` to ``new``."""
    return new in TRANSITIONS.get(old, ())
