"""The fate of an attempt: outcomes, retry backoff, the crash cap and attempt overrides.

No I/O and no clock: callers pass the random source, so each rule can be tested exhaustively.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Mapping

from jobrun.states import Outcome, Status

# Attempt outcomes (jobrun/states.py), by the names the master and the child use.
SUCCEEDED = Outcome.SUCCEEDED
FAILED = Outcome.FAILED
RETRY = Outcome.RETRY
TIMEOUT = Outcome.TIMEOUT
WORKER_LOST = Outcome.WORKER_LOST
LEASE_EXPIRED = Outcome.LEASE_EXPIRED
CANCELLED = Outcome.CANCELLED
RELEASED = Outcome.RELEASED


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: delay ~ U(0, min(cap, base * factor**(n-1)))."""

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0

    def ceiling(self, attempt: int) -> float:
        """The upper bound of the delay after the ``attempt``-th start failed (attempt >= 1)."""
        try:
            value = self.base * self.factor ** max(attempt - 1, 0)
        except OverflowError:  # the power is past any float: the cap, but a base 0 stays 0
            value = self.base * math.inf if self.base else 0.0
        return min(self.cap, value)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(0.0, self.ceiling(attempt))


DEFAULT_RETRY = RetryPolicy()
# A job whose attempts killed this many children is dead, unless its task says otherwise.
DEFAULT_MAX_CRASHES = 3


@dataclass(frozen=True)
class Fate:
    """What becomes of a job after an attempt: its next status and, if queued, the delay."""

    status: str  # one of states.FINISHES: where a leased job goes
    delay: float = 0.0


def decide(outcome: str, *, attempts: int, max_attempts: int, crashes: int = 0,
           max_crashes: int = DEFAULT_MAX_CRASHES, retry_delay: float | None = None,
           policy: RetryPolicy = DEFAULT_RETRY, permanent: bool = False,
           rng: random.Random | None = None) -> Fate:
    """The fate of a job whose ``attempts``-th start ended with ``outcome``.

    ``crashes`` counts earlier worker_lost attempts (not this one). A cancelled job whose
    attempt then fails is turned ``cancelled`` by the completion query, not here, because
    only the database knows whether cancel was requested meanwhile.
    """
    if outcome == SUCCEEDED:
        return Fate(Status.SUCCEEDED)
    if outcome == CANCELLED:
        return Fate(Status.CANCELLED)
    if outcome == RELEASED:
        # Cut short by the master's shutdown (or, in a child with slots, by a neighbour's
        # kill), not by the job: back at once, no backoff. The start counts all the same, so
        # a job that never gets to finish (a two-hour job under hourly deploys) ends dead
        # once its starts reach the bound, instead of starting forever.
        return Fate(Status.QUEUED, 0.0) if attempts < max_attempts else Fate(Status.DEAD)
    if permanent:
        return Fate(Status.DEAD)
    if outcome == WORKER_LOST and crashes + 1 >= max_crashes:
        return Fate(Status.DEAD)
    if attempts >= max_attempts:
        return Fate(Status.DEAD)
    if outcome == RETRY and retry_delay is not None:
        return Fate(Status.QUEUED, max(0.0, float(retry_delay)))
    return Fate(Status.QUEUED, policy.delay(attempts, rng))


def max_attempts_for(enqueued: int, task_limit: int | None) -> int:
    """A task's own max_attempts caps what its jobs were enqueued with (never raises it)."""
    return min(enqueued, task_limit) if task_limit else enqueued


def limit_to_record(enqueued: int, task_limit: int | None, outcome: str,
                    status: str) -> int | None:
    """The task's max_attempts to write to a job whose attempt ended with ``outcome`` and sent
    it to ``status``, so that the job shows the limit that applied (``3/3``, not ``3/5``): the
    task's, when lower than the job's and the attempt failed (requeued for a retry, or dead);
    else None. Successes, cancels and releases leave the figure as enqueued: writing it costs
    a statement, and a failed attempt comes before the limit can end a job."""
    applied = max_attempts_for(enqueued, task_limit)
    if applied >= enqueued or outcome in (SUCCEEDED, CANCELLED, RELEASED):
        return None
    return applied if status in (Status.QUEUED, Status.DEAD) else None


def max_crashes_for(task: Mapping[str, Any]) -> int:
    """The crash cap of a task's jobs: its own, else the default."""
    value = task.get("max_crashes")
    return DEFAULT_MAX_CRASHES if value is None else value


def retry_policies(tasks: Mapping[str, Mapping[str, Any]]) -> dict[str, RetryPolicy]:
    """The retry ladders tasks declare (the ones that do not use the default)."""
    return {name: RetryPolicy(*cfg["retry"]) for name, cfg in tasks.items() if "retry" in cfg}
