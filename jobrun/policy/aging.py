"""Priority aging: how often the sweeper runs, what a job's priority becomes, and the bound
on how long a job can wait. Pure functions of their inputs (no clock); docs/queues.md derives
the bound.

A queued job of a queue with ``aging = A`` gains one priority step (priority - 1, lower runs
first) for every A it has waited since it became runnable, down to PRIORITY_MIN. The sweeper
(jobrun/worker/aging.py) writes those steps into the row, so the claim keeps ordering by the
stored priority on its index. Step k of a job is due at run_at + k * A (the row records the
time its last step was due, not the time the sweep ran), so a late sweep delays a step but
never the ones after it.
"""

from __future__ import annotations

import math

PRIORITY_MIN, PRIORITY_MAX = -100, 100
SWEEP_MIN, SWEEP_MAX = 0.01, 60.0   # seconds between sweeps of one queue
SWEEPS_PER_STEP = 4                 # sweeps per aging interval
IDLE_POLL = 1.0                     # seconds between reads of the settings while nothing ages


def sweep_interval(aging: float) -> float:
    """Seconds between two sweeps of a queue whose aging interval is ``aging`` seconds: a
    quarter of it (a step is written at most a quarter interval late), from 10 ms (sweeps are
    statements) to 60 s (a day-long interval need not wait hours for its step)."""
    return min(SWEEP_MAX, max(SWEEP_MIN, aging / SWEEPS_PER_STEP))


def next_wait(intervals: list[float]) -> float:
    """How long the sweeper sleeps before its next pass: the shortest interval of the queues
    that age, or IDLE_POLL (to notice a queue that starts aging) when none does."""
    return min([IDLE_POLL, *intervals])


def steps_due(priority: int, waited: float, aging: float) -> int:
    """Steps a job at ``priority`` is owed after ``waited`` seconds since its last step was
    due (what one sweep writes: the SQL computes the same)."""
    if waited < aging or priority <= PRIORITY_MIN:
        return 0
    return min(priority - PRIORITY_MIN, math.floor(waited / aging))


def effective_priority(priority: int, waited: float, aging: float | None) -> int:
    """The priority of a job enqueued at ``priority`` after waiting ``waited`` seconds, once
    every step due has been written."""
    if aging is None:
        return priority
    return priority - steps_due(priority, waited, aging)


def starvation_bound(priority: int, aging: float, sweep_lag: float, ahead: int,
                     throughput: float) -> float:
    """An upper bound on the seconds a runnable job at ``priority`` waits before it is
    claimed: its steps to PRIORITY_MIN, the lag of the sweep that writes the last step, then
    the jobs ahead of it at PRIORITY_MIN (at most those runnable when it became runnable)
    drained at ``throughput`` jobs/s."""
    if throughput <= 0:
        return math.inf
    return (priority - PRIORITY_MIN) * aging + sweep_lag + ahead / throughput
