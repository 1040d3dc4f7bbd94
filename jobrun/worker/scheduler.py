"""The scheduler: every master runs it; the leader fires (worker/leader.py holds the lease).

Every master syncs the schedules declared in its code once (any master may start with new
code). Only the leader fires: it asks the elector before each fire, and each fire is one
autocommit statement (``schedule_fire``): lock the leader row FOR SHARE checking owner, term
and expiry, advance the schedule if it is still at the slot and version read, and insert the
slots' jobs with idempotency key ``sched:<id>:<slot UTC>``. A stale leader's statement changes
nothing; a slot's job can never be inserted twice. A refused fire asks the elector to check
the lease at once.

Timing: the leader sleeps until the earliest next fire (the database clock, read with the due
schedules, mapped to the monotonic clock), a change of leadership, or a change of the
schedules table (NOTIFY on ``<schema>_schedules``, with a poll every ``poll`` seconds as a
floor). Every statement of its session is bounded by the lease's period (statement_timeout):
a fire may not outlive the time the leader trusts its lease for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable

import psycopg

from jobrun import schedules
from jobrun.errors import Conflict, InvalidInput, JobrunError
from jobrun.logs import event
from jobrun.ops import Op
from jobrun.policy import cron
from jobrun.sql import Queries
from jobrun.store import db
from jobrun.store.connector import Connector
from jobrun.worker.leader import Elector, lease_bound
from jobrun.worker.lifecycle import Service, backoff_sleep
from jobrun.worker.notifier import Notifier

log = logging.getLogger("jobrun.scheduler")

DUE_BATCH = 100  # schedules looked at per pass


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, dsn: str | Connector, queries: Queries, leader: Elector, *, poll: float = 1.0,
                 payload_limit: int = 1024 * 1024,
                 declared: Callable[[], Iterable[dict[str, Any]]] = list,
                 metrics: Any = None, on_db_error: Callable[[], None] | None = None,
                 notifier: Notifier | None = None) -> None:
        """``notifier``: a master's, whose connection then also listens for schedule changes
        (one listening backend per master); without one, the scheduler listens on its own."""
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.q = queries
        self.leader = leader
        leader.subscribe(self.wake)  # elected, stepped down, or the lease checked again
        self.poll = poll
        self.payload_limit = payload_limit
        self.declared = declared
        self.metrics = metrics
        self.on_db_error = on_db_error
        self._db_ref: datetime | None = None  # database clock at _mono_ref
        self._mono_ref = 0.0
        self._synced = False
        self._wake = asyncio.Event()
        self._session = self.db.session()
        self.notifier: Notifier | None = None
        if notifier is not None:
            notifier.also(queries.listen_schedules, queries.schedules_channel, self.wake)
        else:
            self.notifier = Notifier(self.db, queries.listen_schedules, {""}, self.wake,
                                     on_db_error=on_db_error)

    def wake(self) -> None:
        self._wake.set()

    def reconfigure(self, settings) -> None:
        """A SIGHUP's payload limit (the lease's TTL is the elector's)."""
        self.payload_limit = settings.max_payload_bytes

    # --- lifecycle ------------------------------------------------------------------------

    async def _run(self) -> None:
        if self.notifier is not None:
            self.notifier.start()
        failures = 0
        try:
            while True:
                try:
                    # A statement may not outlive the time we trust our lease for.
                    await self._session.get(lease_bound(self.leader.period))
                    self._wake.clear()
                    wait = await self.step()
                    failures = 0
                except (psycopg.Error, JobrunError, OSError) as exc:
                    failures += 1
                    self.db.failed(exc)
                    if self.on_db_error:
                        self.on_db_error()
                    event(log, logging.WARNING, "scheduler.failed", error=db.first_line(exc),
                          retry=failures)
                    await self._session.close()
                    await backoff_sleep(failures, cap=self.leader.period)
                    continue
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, wait))
                except asyncio.TimeoutError:
                    pass
        finally:
            if self.notifier is not None:
                await self.notifier.stop()
            await self._session.close()

    @property
    def _conn(self) -> psycopg.AsyncConnection | None:
        """The scheduler's connection, while it has one."""
        return self._session.conn

    # --- one pass -------------------------------------------------------------------------

    async def step(self) -> float:
        """Sync declared schedules once; as leader, fire what is due. Returns how long to wait
        (seconds) before the next pass; a change of leadership or of the schedules wakes it
        sooner."""
        assert self._conn is not None
        if not self._synced:
            await self._sync()
        wait = self.poll
        if self.leader.still_leading():
            nxt = await self._fire_due()
            if nxt is not None:
                wait = min(wait, (nxt - self._db_now()).total_seconds())
        return max(0.0, wait)

    def _db_now(self) -> datetime:
        assert self._db_ref is not None
        return self._db_ref + timedelta(seconds=time.monotonic() - self._mono_ref)

    def _clock(self, db_now: datetime, sent: float) -> None:
        received = time.monotonic()
        self._db_ref, self._mono_ref = db_now, (sent + received) / 2

    async def _sync(self) -> None:
        declared = list(self.declared())
        try:
            changed = await drive(self._conn, schedules.sync_declared(self.q, self.payload_limit,
                                                                      declared))
        except (Conflict, psycopg.errors.UniqueViolation):
            return  # another master synced the same schedule meanwhile: again next pass
        except JobrunError as exc:
            # Invalid in code (say, an undeclared queue): reported, not retried in a loop.
            event(log, logging.ERROR, "schedule.declared_invalid", error=str(exc))
            changed = []
        self._synced = True
        if changed:
            event(log, logging.INFO, "schedule.declared_synced", schedules=",".join(changed))

    async def _fire_due(self) -> datetime | None:
        """Fire every due schedule; returns the earliest next fire among those looked at."""
        sent = time.monotonic()
        cur = await self._conn.execute(self.q.schedules_due_soon, {"limit": DUE_BATCH})
        rows = await cur.fetchall()
        if rows:
            self._clock(rows[0]["db_now"], sent)
        earliest: datetime | None = None
        for row in rows:
            now = row["db_now"]
            if row["next_fire_at"] > now:
                earliest = row["next_fire_at"] if earliest is None else min(earliest, row["next_fire_at"])
                break  # ordered by next fire: the rest are later still
            if not self.leader.still_leading():
                return None
            nxt = await self._fire(row, now)
            if nxt is not None:
                earliest = nxt if earliest is None else min(earliest, nxt)
        if len(rows) == DUE_BATCH and earliest is None:
            return self._db_now()  # more are due: go round again at once
        return earliest

    async def _fire(self, row: dict[str, Any], now: datetime) -> datetime | None:
        try:
            d = cron.due(row["cron"], row["timezone"], row["next_fire_at"], now, row["catch_up"],
                         row["ends_at"])
        except InvalidInput as exc:
            # Written past the checks (plain SQL): it cannot fire; it expires, with an error.
            event(log, logging.ERROR, "schedule.invalid", schedule=row["name"], error=str(exc))
            d = cron.Due([], 0, None)
        cur = await self._conn.execute(self.q.schedule_fire, {
            "owner": self.leader.owner, "term": self.leader.term, "id": row["id"],
            "version": row["version"],
            "expected": row["next_fire_at"], "next_fire_at": d.next_at,
            "last_fire_at": d.fire[-1] if d.fire else None, "slots": d.fire})
        result = await cur.fetchone()
        if not result["advanced"]:
            # Lease lost, or the schedule changed meanwhile: ask the database who leads now
            # (the elector wakes this part with the answer).
            self.leader.recheck()
            return None
        made = len(result["job_ids"])
        if len(d.fire) != made:
            event(log, logging.WARNING, "schedule.jobs_not_created", schedule=row["name"],
                  slots=len(d.fire), created=made,
                  note="already enqueued, or the schedule's queue is not declared")
        late = [s for s in d.fire if now - s > cron.ON_TIME]
        if self.metrics:
            self.metrics.schedule_fires.inc(made)
            self.metrics.schedule_skipped.inc(d.skipped)
            self.metrics.schedule_catch_up.inc(len(late))
            for slot in d.fire:
                self.metrics.schedule_lag.observe(max(0.0, (result["db_now"] - slot).total_seconds()))
        # On time: debug (a seconds schedule would log every second); catch-up or skips: warning.
        event(log, logging.DEBUG if not (late or d.skipped) else logging.WARNING, "schedule.fired",
              schedule=row["name"], slots=len(d.fire), jobs=made, skipped=d.skipped,
              catch_up=len(late), next=d.next_at.isoformat() if d.next_at else "expired")
        return d.next_at


async def drive(conn: psycopg.AsyncConnection, op: Op) -> Any:
    """Run an operation generator (jobrun.ops style) on an async connection."""
    try:
        step = next(op)
        while True:
            cur = await conn.execute(step.query, step.params)
            result = await cur.fetchall() if step.returns_rows else cur.rowcount
            step = op.send(result)
    except StopIteration as stop:
        return stop.value
