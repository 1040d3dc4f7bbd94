"""Dispatch: which queues a master serves, in what order, and how much of a claim each may take.

The claim statement (``claim_jobs`` in jobrun/sql/queries.sql) does this work inside
PostgreSQL, where racing masters take turns; the functions here are the same rules written
once in Python, pure, so they can be tested exhaustively (tests/unit/test_policy_dispatch.py)
and so the master can size its own part (``rooms``). docs/dispatch.md explains them.

- ``parse_queues``: ``-Q emails=4,default``: the queues, and at most how many of this master's
  jobs of a queue may be leased at once (running or waiting in a child).
- ``order``: how the claim merges the runnable jobs of several queues:
  ``global`` (the default, and the behaviour before the option existed): one order by
  (priority, run_at, id) across all served queues; ``priority``: queues in -Q order, an
  earlier queue's jobs all before a later one's; ``round_robin``: one job from each queue in
  turn, the queue that goes first rotating from claim to claim.
- ``rate_room``: the sliding rate window: the starts a claim may add so that no window of
  one period holds more than the limit.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from jobrun import validate
from jobrun.errors import InvalidInput

ORDERS = ("global", "priority", "round_robin")
DEFAULT_ORDER = "global"


def parse_queues(value: str | Iterable[str]) -> tuple[tuple[str, int | None], ...]:
    """``"emails=4,default"`` (or a list of such items) as ``(("emails", 4), ("default",
    None))``; one clear line for anything else."""
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    out: list[tuple[str, int | None]] = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, eq, cap = item.partition("=")
        name = validate.queue_name(name.strip())
        limit = None
        if eq:
            cap = cap.strip()
            if not cap.isdigit() or int(cap) < 1 or len(cap) > 9:
                raise InvalidInput(f"queue {name}: invalid limit {cap!r} in {item!r}: write"
                                   " NAME=N with N a whole number of at least 1 (jobs of that"
                                   " queue this master runs at once)")
            limit = int(cap)
        if any(name == seen for seen, _ in out):
            raise InvalidInput(f"queue {name} is named twice")
        out.append((name, limit))
    if not out:
        raise InvalidInput("name at least one queue")
    return tuple(out)


def check_order(value: str) -> str:
    if value not in ORDERS:
        raise InvalidInput(f"invalid queue order {value!r}: one of {', '.join(ORDERS)}")
    return value


def rooms(queues: Sequence[str], limits: Mapping[str, int], held: Mapping[str, int]
          ) -> list[int | None]:
    """Per served queue, how many more of its jobs this master may lease (None: no limit of
    its own), from its limits and the jobs of each queue it holds (running or prefetched)."""
    return [None if q not in limits else max(0, limits[q] - held.get(q, 0)) for q in queues]


def sort_key(order: str, *, pos: int, rank: int, turn: int, nqueues: int, priority: int,
             run_at: Any, job_id: int) -> tuple:
    """The claim's order of one candidate job: ``pos`` is its queue's place in -Q (1-based),
    ``rank`` its place among its queue's candidates (1-based), ``turn`` the claim's rotation.
    The SQL's ORDER BY in ``claim_jobs`` is this, term for term."""
    return (rank if order == "round_robin" else 0,
            (pos - 1 + turn) % nqueues if order != "global" else 0,
            priority, run_at, job_id)


def merge(order: str, candidates: Sequence[Sequence[tuple[int, Any, int]]], allowed: Sequence[int],
          limit: int, turn: int) -> list[tuple[int, int]]:
    """What one claim takes: ``candidates[i]`` are queue i's runnable jobs as (priority,
    run_at, id) in its index order, ``allowed[i]`` how many of them it may take; returns
    (queue index, job id) in the order taken, at most ``limit``."""
    keyed = []
    for i, jobs in enumerate(candidates):
        for rank, (priority, run_at, job_id) in enumerate(jobs[:max(0, allowed[i])], start=1):
            keyed.append((sort_key(order, pos=i + 1, rank=rank, turn=turn,
                                   nqueues=len(candidates), priority=priority, run_at=run_at,
                                   job_id=job_id), i, job_id))
    keyed.sort(key=lambda k: k[0])
    return [(i, job_id) for _, i, job_id in keyed[:max(0, limit)]]


def next_turn(turn: int, nqueues: int) -> int:
    """The rotation of the next claim (round_robin: another queue goes first)."""
    return (turn + 1) % max(1, nqueues)


BUCKETS = 50  # a rate window keeps its starts in buckets of a fiftieth of the period


def rate_margin(period: float) -> float:
    return min(1.0, period)


def rate_bucket(now: float, period: float) -> float:
    """The time a claim at ``now`` records its starts at: the end of its bucket (at or after
    ``now``), so a start counts a little longer than a period, never shorter."""
    size = period / BUCKETS
    return max(now, math.ceil(now / size) * size)


def rate_room(window: Iterable[tuple[float, int]], now: float, period: float, limit: int,
              last: float = -math.inf) -> tuple[int, float]:
    """Starts a claim at ``now`` may add, and seconds until a start leaves the window, from
    the recorded (bucket time, count) of earlier claims, ``last`` the latest clock of those.

    Counting every start after ``now - period`` (later ones too: a claim that began before
    another may take the lock after it) keeps every window of length ``period`` at or under
    ``limit``: the last claim recorded in any window saw every earlier claim of that window,
    since all of them are after its own time minus the period. Buckets move starts later,
    which only counts them longer. A claim whose clock is more than the margin behind
    ``last`` may have missed starts trimmed since (``rate_record``): it adds none."""
    if now < last - rate_margin(period):
        return 0, 0.05
    inside = [(at, n) for at, n in window if at > now - period]
    used = sum(n for _, n in inside)
    retry = (min(at for at, _ in inside) + period - now) if inside else period
    return max(0, limit - used), max(0.0, retry)


def rate_record(window: Iterable[tuple[float, int]], now: float, period: float, started: int
                ) -> list[tuple[float, int]]:
    """The window after a claim at ``now`` started ``started`` jobs: its bucket added, and
    buckets older than a period plus the margin dropped."""
    merged: dict[float, int] = {}
    for at, n in [*window, (rate_bucket(now, period), started)]:
        if at > now - period - rate_margin(period):
            merged[at] = merged.get(at, 0) + n
    return sorted(merged.items())
