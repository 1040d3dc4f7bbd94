"""Pure policies: retry backoff, the fate of an attempt, child recycling, lease deadlines.

Nothing here does I/O or reads a clock: callers pass the time and the random source, so each
rule can be tested exhaustively.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Attempt outcomes recorded in job_attempts.outcome.
SUCCEEDED = "succeeded"
FAILED = "failed"
RETRY = "retry"
TIMEOUT = "timeout"
WORKER_LOST = "worker_lost"
LEASE_EXPIRED = "lease_expired"
CANCELLED = "cancelled"
RELEASED = "released"


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
        except OverflowError:
            return self.cap
        return min(self.cap, value)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(0.0, self.ceiling(attempt))


DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True)
class Fate:
    """What becomes of a job after an attempt: its next status and, if queued, the delay."""

    status: str  # 'succeeded' | 'queued' | 'dead' | 'cancelled'
    delay: float = 0.0


def decide(outcome: str, *, attempts: int, max_attempts: int, crashes: int = 0,
           max_crashes: int = 3, retry_delay: float | None = None,
           policy: RetryPolicy = DEFAULT_RETRY, permanent: bool = False,
           rng: random.Random | None = None) -> Fate:
    """The fate of a job whose ``attempts``-th start ended with ``outcome``.

    ``crashes`` counts earlier worker_lost attempts (not this one). A cancelled job whose
    attempt then fails is turned ``cancelled`` by the completion query, not here, because
    only the database knows whether cancel was requested meanwhile.
    """
    if outcome == SUCCEEDED:
        return Fate(SUCCEEDED)
    if outcome == CANCELLED:
        return Fate(CANCELLED)
    if outcome == RELEASED:
        # Cut short by the master's shutdown, not by the job: back at once, and the attempt
        # is given back (see refund in the completion).
        return Fate("queued", 0.0)
    if permanent:
        return Fate("dead")
    if outcome == WORKER_LOST and crashes + 1 >= max_crashes:
        return Fate("dead")
    if attempts >= max_attempts:
        return Fate("dead")
    if outcome == RETRY and retry_delay is not None:
        return Fate("queued", max(0.0, float(retry_delay)))
    return Fate("queued", policy.delay(attempts, rng))


def should_recycle(*, tasks_done: int, max_tasks: int, rss_bytes: int, max_rss_bytes: int,
                   baseline_rss_bytes: int) -> str | None:
    """Why a child should be replaced after a job, or None.

    A child that was already over the memory limit when it became ready is never recycled for
    memory: its replacement would start just as large, and replacing it after every job would
    churn (the master warns once instead).
    """
    if max_tasks and tasks_done >= max_tasks:
        return "max_tasks"
    if max_rss_bytes and rss_bytes > max_rss_bytes and baseline_rss_bytes <= max_rss_bytes:
        return "max_memory"
    return None


def lease_deadline(last_renewal: float, ttl: float, period: float) -> float:
    """Monotonic time by which a lease must have been renewed again or be fenced.

    The database lets the lease lapse at (renewal time + ttl) on its own clock; fencing one
    heartbeat period earlier leaves room for clock drift and a slow statement.
    """
    return last_renewal + ttl - period


def run_time_average(previous: float | None, sample: float) -> float:
    """Recent run time of a task: an exponential moving average (the first sample as is).
    Both the master (what to hand ahead) and a child (which results to hold) keep one."""
    return sample if previous is None else previous + 0.2 * (sample - previous)
