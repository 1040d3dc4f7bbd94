"""Prefetch: how many jobs to claim, and which children may hold more than one.

A busy child may be handed more jobs, which wait in its pipe and start the moment it finishes
the one before: no claim, frame or wake-up between them. Only while every job it holds is of
a task whose recent runs were short, and only as long as the work queued in it (by those run
times) stays under ``budget`` (--prefetch-max-runtime), so no job waits in a child longer.

Results are batched the same way: ``complete_linger`` says how long the next completion
statement waits for its batch to fill.
"""

from __future__ import annotations

from typing import Iterable, Mapping

# How long a completion statement waits for more results: with jobs waiting in the queue, and
# with every child also holding jobs behind the one it runs.
LINGER = 0.005
DEEP_LINGER = 0.05


def cap(prefetch: int, max_tasks: int, jobs_done: int) -> int:
    """How many jobs a child may hold: the prefetch depth, but never more than it will run
    before --max-tasks-per-child retires it."""
    return min(prefetch, max_tasks - jobs_done) if max_tasks else prefetch


def backlog(tasks: Iterable[str], runtime: Mapping[str, float], budget: float) -> float | None:
    """Seconds of work held (tasks by recent run time); None if any of it may be long."""
    total = 0.0
    for task in tasks:
        took = runtime.get(task)
        if took is None or took >= budget:
            return None
        total += took
    return total


def headroom(held: int, limit: int, held_work: float | None, budget: float) -> float | None:
    """Seconds of short work a child may still be handed, or None if it may take no more (at
    its cap, which also covers --prefetch 1, or holding a long job, or at the budget)."""
    if held >= limit or held_work is None or held_work >= budget:
        return None
    return budget - held_work


def room(*, prefetch: int, budget: float, runtime: Mapping[str, float], idle: Iterable[int],
         target: int, busy: Iterable[tuple[int, float | None, bool]]) -> tuple[int, int, bool]:
    """Jobs to claim beyond one per idle child; that figure when every child is empty; and
    whether a child that may be topped up runs its last job.

    ``prefetch`` is the most a new child may hold (its ``cap``); ``idle`` has each idle
    child's cap, which --max-tasks-per-child lowers as the child nears its last job;
    ``busy`` has one (free slots = cap - held, headroom, holds jobs behind the running one)
    per busy child. Estimates: rows no child can take are given back, so they err low.
    """
    if prefetch <= 1 or not runtime:
        return 0, 0, False
    typical = max(max(runtime.values()), 1e-6)  # the slowest task seen lately
    if typical >= budget:
        return 0, 0, False
    ahead = min(prefetch, int(budget / typical)) - 1  # behind the one it runs
    total = sum(min(ahead, cap - 1) for cap in idle if cap > 1)
    dry_soon = False
    for free, room_left, queued in busy:
        if room_left is not None:
            total += min(free, max(1, int(room_left / typical)))
            dry_soon = dry_soon or not queued
    return total, target * ahead, dry_soon


def worth_claiming(idle: int, extra: int, most: int, dry_soon: bool) -> bool:
    """Claim for an idle child at once; top up busy ones when one of them runs its last job or
    three quarters of the room there can be is free, so a deep queue is claimed in batches,
    not a job at a time, and no child waits for a claim."""
    return bool(idle) or (extra > 0 and (dry_soon or extra >= most * 3 // 4))


def results_to_reconsider(idle: int, extra: int, most: int, dry_soon: bool) -> int:
    """After a claim decision (``worth_claiming`` of these figures), how many busy children may
    run on to a job they already hold before the decision can change: each such result frees
    one slot, so ``extra`` grows by one at most (run times aside, which move slowly), and no
    child runs dry while it still holds one. 0: the decision is to claim now; 1 when no figure
    bounds it (no prefetch sizing yet), which is asking again at every result."""
    if worth_claiming(idle, extra, most, dry_soon):
        return 0
    if dry_soon:
        return 1  # a child runs its last job, with no room anywhere: one freed slot is room
    return max(1, most * 3 // 4 - max(extra, 0))


def complete_linger(backlogged: bool, every_child_ahead: bool) -> float:
    """Seconds the next completion statement waits after the last one, for its batch to fill.

    Nothing while the queue keeps up (the last claim came back short): a result is written by the
    next statement there is. A little while jobs wait in the queue: they waited anyway, and
    fewer statements leave more of the machine to them. Longer when, besides, every child holds
    jobs behind the one it runs: no child waits for a claim, so a result written later delays
    no start, and at a few results a statement (jobs of some milliseconds) the statements were
    a good share of the machine."""
    if not backlogged:
        return 0.0
    return DEEP_LINGER if every_child_ahead else LINGER


def slots_worth_claiming(free: int, total: int) -> bool:
    """With slots (--slots): claim for the free slots of busy children once an eighth of all
    slots is free (at least one), so that a full pool refills in batches, not a claim per
    finished job; a job then waits for a slot at most about an eighth of a job's run."""
    return free > 0 and free >= max(1, total // 8)
