"""The aging sweeper: writes the priority steps that waiting jobs of aging queues are owed.

A queue with ``aging = A`` promises that a queued job gains one priority step per A of
waiting (jobrun/policy/aging.py). The claim orders by the stored priority on its index
(jobs_claim), so the steps are written into the rows: each pass runs ``age_queued`` for the
queues due, which walks each queue's priority levels through jobs_claim and promotes the due
prefix of each level (run_at order), in batches. A pass costs index descents per priority
level present plus the rows it promotes and those promoted into their level within the last
interval (skipped by a filter), never a scan of the queue (docs/queues.md).

The cluster's leader runs it (worker/leader.py), for every queue that ages, whichever masters
serve it; a master starts its sweeper when it is elected and cancels it when it steps down.
Concurrent sweeps (a stale leader's last pass beside the new leader's) are safe: rows are locked
FOR UPDATE SKIP LOCKED (a row another sweep or a claim holds is skipped), and a row read before
another sweep promoted it is re-checked on its new version, where it is no longer due. A change
of leader pauses aging for at most the lease's takeover time (ttl + period); a step owed then is
written late, and the steps after it are not moved (each is due at ``run_at + k*A``), so the
starvation bound carries that pause once (docs/queues.md).

Timing: each queue is swept every ``sweep_interval(A)``; the queues' settings are read again
every IDLE_POLL seconds, so a queue that starts (or stops) aging is noticed within that.

Bounded work: a statement promotes at most ``batch`` jobs of one queue (its own short
transaction), and a pass runs at most ``max_batches`` statements per queue. A statement whose
batch was full hands the level it stopped at to the next, which resumes the walk there: a walk
reads each level once, however many statements it takes (restarting at the lowest level
would read the levels already done again, each statement more than the last). A pass whose
last batch was full leaves its queue due at once: the next pass follows without a pause, so a
backlog owed many steps (aging switched on over a million waiting jobs) is worked off in
bounded steps rather than by one pass that runs for minutes.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import psycopg

from jobrun.logs import event
from jobrun.policy.aging import IDLE_POLL, PRIORITY_MIN, next_wait, sweep_interval
from jobrun.sql import Queries
from jobrun.worker.leader import Elector, while_leading
from jobrun.worker.lifecycle import PeriodicDbService

log = logging.getLogger("jobrun.aging")

MAX_BATCHES = 20  # statements per queue per pass: at most batch * MAX_BATCHES jobs promoted


class AgingSweeper(PeriodicDbService):
    name = "aging"
    logger = log

    def __init__(self, dsn: str, queries: Queries, queues: list[str] | None, *, batch: int = 500,
                 max_batches: int = MAX_BATCHES,
                 on_aged: Callable[[str, int], None] | None = None,
                 on_db_error: Callable[[], None] | None = None,
                 leader: Elector | None = None) -> None:
        """``queues``: those to sweep; None: every queue that ages (the leader's sweep)."""
        super().__init__(dsn, on_db_error)
        self.leader = leader  # None: sweep always (a test, a single process)
        self.q = queries
        self.queues = None if queues is None else list(queues)
        self.batch = batch
        self.max_batches = max_batches
        self.on_aged = on_aged
        self.aged = 0
        self.statements = 0                    # age_queued statements run
        self.intervals: dict[str, float] = {}  # queue -> seconds between its sweeps
        self._read_at = 0.0                    # monotonic: next read of the settings
        self._next: dict[str, float] = {}      # queue -> monotonic time of its next sweep
        self._start: dict[str, int] = {}       # queue -> level its unfinished walk resumes at

    async def _run(self) -> None:
        await while_leading(self.leader, super()._run, self.name)

    def reconfigure(self, settings) -> None:
        if self.queues is not None:
            self.queues = list(settings.queues)
        self._read_at = 0.0

    async def tick(self, conn: psycopg.AsyncConnection) -> float:
        return await self.sweep(conn, time.monotonic())

    async def sweep(self, conn: psycopg.AsyncConnection, now: float) -> float:
        """One pass at monotonic time ``now``: sweep the queues due; returns the seconds until
        the next pass."""
        if now >= self._read_at:
            cur = await conn.execute(self.q.aging_queues, {"queues": self.queues})
            self.intervals = {r["name"]: sweep_interval(r["aging"]) for r in await cur.fetchall()}
            self._next = {n: self._next.get(n, now) for n in self.intervals}
            self._read_at = now + IDLE_POLL
        due = [n for n, at in self._next.items() if at <= now]
        if due:
            _, more = await self.age(conn, due)
            for n in due:  # a pass cut short leaves its queue due: the next follows at once
                self._next[n] = now if n in more else now + self.intervals[n]
        ahead = [at - now for at in self._next.values()]
        return max(0.0, next_wait(ahead + [self._read_at - now]))

    async def age(self, conn: psycopg.AsyncConnection, queues: list[str]) -> tuple[int, set[str]]:
        """Promote jobs of ``queues`` that are owed a step: for each queue a batch per
        statement, at most ``max_batches`` statements, each resuming the walk of the levels
        where the last full batch stopped. Returns the jobs promoted and the queues cut short
        (more may be owed there)."""
        total, more = 0, set()
        for queue in queues:
            for _ in range(self.max_batches):
                start = self._start.get(queue, PRIORITY_MIN)
                cur = await conn.execute(self.q.age_queued,
                                         {"queues": [queue], "batch": self.batch, "start": start})
                rows = await cur.fetchall()
                self.statements += 1
                total += len(rows)
                if rows and self.on_aged:
                    self.on_aged(queue, len(rows))
                if len(rows) < self.batch:  # the walk reached the top: the next starts afresh
                    self._start.pop(queue, None)
                    break
                self._start[queue] = max(r["level"] for r in rows)
            else:
                more.add(queue)
        if total:
            event(log, logging.DEBUG, "aging.promoted", jobs=total, queues=",".join(queues),
                  more=",".join(sorted(more)))
        self.aged += total
        return total, more
