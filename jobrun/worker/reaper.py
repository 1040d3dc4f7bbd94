"""The reaper: the cluster's leader runs it (worker/leader.py); many at once would be safe.

A transactional attempt's database session whose lease expired is ended first (its open
transaction may hold the effect key a successor needs). Leases past their expiry on the
database clock go back to ``queued`` with backoff (or
``dead`` when attempts are spent, ``cancelled`` when cancel was requested), each guarded by
the token it read, with a ``lease_expired`` attempt row. The backoff is the task's own ladder
(retry_base / retry_factor / retry_cap) for the tasks this master learned from its children's
ready frames (``tasks``), and the default ladder for any other task: any master reaps any
job, also one of a task it does not serve. It also purges finished jobs older
than their queue's retention, or the master's ``retention`` for queues without one (0: keep
those), in small batches so no lock is held for long.

Only the leader reaps: a master starts its reaper when it is elected (the first pass at once)
and cancels it when it steps down, so during a change of leader an expired lease waits at most
the lease's takeover time (ttl + period) plus one reap interval. Every statement is guarded by
its rows (a lease's token and expiry on the database clock), so a stale leader's last pass, or
two leaders' passes at once, do no harm.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable, Mapping

import psycopg

from jobrun.store.driver import drive_async
from jobrun import ops
from jobrun.config import MAX_LEASE_TTL
from jobrun.worker.leader import Elector, while_leading
from jobrun.worker.lifecycle import PeriodicDbService
from jobrun.logs import event
from jobrun.policy import DEFAULT_RETRY, RetryPolicy, reap_interval, retry_policies
from jobrun.sql import Queries
from jobrun.validate import MAX_DELAY

log = logging.getLogger("jobrun.reaper")


def reap_params(limit: int, policies: Mapping[str, RetryPolicy],
                default: RetryPolicy = DEFAULT_RETRY) -> dict[str, Any]:
    """reap_expired's parameters: the tasks' retry ladders as parallel arrays, and the default
    for every other task. The statement draws the delay under retry_ceiling (migration 0014),
    which computes RetryPolicy.ceiling in logarithms: a ladder with a value that is not finite
    or a factor that is not positive is not sent (its task's jobs take the default), and no
    cap goes beyond the longest delay there is (validate.MAX_DELAY: an interval out of range
    would fail the whole statement). ``max_lease``: the longest lease a master takes
    (config.MAX_LEASE_TTL); one ending later is reaped at once."""
    usable = {task: p for task, p in policies.items()
              if all(math.isfinite(v) for v in (p.base, p.factor, p.cap)) and p.factor > 0}
    return {"limit": limit, "max_lease": MAX_LEASE_TTL, "base": default.base, "factor": default.factor, "cap": default.cap,
            "tasks": list(usable), "bases": [p.base for p in usable.values()],
            "factors": [p.factor for p in usable.values()],
            "caps": [min(p.cap, MAX_DELAY) for p in usable.values()]}


class Reaper(PeriodicDbService):
    name = "reaper"
    logger = log

    def __init__(self, dsn: str, queries: Queries, interval: float, retention: float,
                 purge_interval: float = 60.0, batch: int = 500,
                 on_reaped: Callable[[int], None] | None = None,
                 on_db_error: Callable[[], None] | None = None,
                 leader: Elector | None = None,
                 tasks: Callable[[], Mapping[str, Mapping[str, Any]]] = dict) -> None:
        """``leader``: the master's elector (None: reap always, as in a test or a single
        process); ``tasks``: the settings of the tasks the master knows (dispatcher.tasks),
        read at each reap for their retry ladders."""
        super().__init__(dsn, on_db_error)
        self.leader = leader
        self.tasks = tasks
        self.q = queries
        self.interval = interval
        self.retention = retention
        self.purge_interval = purge_interval
        self.batch = batch
        self.on_reaped = on_reaped
        self.reaped = 0
        self.purged = 0
        self._next_purge = 0.0

    async def _run(self) -> None:
        await while_leading(self.leader, super()._run, self.name)

    def reconfigure(self, settings) -> None:
        self.interval = reap_interval(settings.lease_ttl)
        self.retention = settings.retention

    async def tick(self, conn: psycopg.AsyncConnection) -> float:
        await self.reap(conn)
        # Also with retention 0 (keep): queues with a retention of their own.
        if time.monotonic() >= self._next_purge:
            await self.purge(conn)
            self._next_purge = time.monotonic() + self.purge_interval
        return self.interval  # the reaper's period

    async def end_stale_sessions(self, conn: psycopg.AsyncConnection) -> None:
        """End the sessions of transactional attempts whose lease expired: a frozen holder's
        open transaction keeps its effect key locked, and the successor would wait on it."""
        cur = await conn.execute(self.q.end_stale_handler_sessions)
        ended = await cur.fetchall()
        if ended:
            event(log, logging.WARNING, "lease.session_ended", jobs=[r["job_id"] for r in ended],
                  backends=[r["pid"] for r in ended])

    async def reap(self, conn: psycopg.AsyncConnection) -> int:
        await self.end_stale_sessions(conn)
        total = 0
        params = reap_params(self.batch, retry_policies(self.tasks()))
        while True:
            cur = await conn.execute(self.q.reap_expired, params)
            ids = [row["job_id"] for row in await cur.fetchall()]
            total += len(ids)
            if ids:
                event(log, logging.WARNING, "lease.expired", jobs=ids[:20], count=len(ids))
                if self.on_reaped:
                    self.on_reaped(len(ids))
            if len(ids) < self.batch:
                break
        self.reaped += total
        return total

    async def purge(self, conn: psycopg.AsyncConnection) -> int:
        total = await drive_async(ops.purge(self.q, self.retention, batch=self.batch), conn)
        if total:
            event(log, logging.INFO, "retention.purged", jobs=total)
        self.purged += total
        return total
