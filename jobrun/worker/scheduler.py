"""The scheduler: every master runs it; one leads at a time, by a lease in the database.

Leadership (the ``scheduler_leader`` row, database clock):

    follower --acquire (row free or expired)--> leader --renew every `period`--> leader
       ^                                          |
       +---- renewal failed, refused, or the local deadline passed (step down at once)

* A leader renews every ``period`` = ttl / 3; each renewal sets ``expires_at = now() + ttl``.
* It trusts its lease only until ``deadline`` = (monotonic time the renewal was *sent*) +
  ttl - period: the database set its expiry after that send, so the leader stops acting one
  period before the database could hand the lease to anyone else. A SIGSTOPped leader wakes
  past its deadline and steps down before it fires anything.
* A follower tries to acquire every ``period``; a lease expires at most ttl after its holder
  stopped renewing, so a dead or frozen leader is replaced within ttl + period (plus one
  statement). Nothing is held by a session: the database ends nothing, and a frozen process
  blocks no one (no advisory lock, no open transaction between statements).
* Each fire is one autocommit statement (``schedule_fire``): lock the leader row FOR SHARE
  checking owner, term and expiry, advance the schedule if it is still at the slot and
  version read, and insert the slots' jobs with idempotency key ``sched:<id>:<slot UTC>``.
  A stale leader's statement changes nothing; a slot's job can never be inserted twice.

Timing: the leader sleeps until the earliest next fire (database clock mapped to the
monotonic clock at each renewal), the next renewal, or a change of the schedules table
(NOTIFY on ``<schema>_schedules``, with a poll every ``poll`` seconds as a floor).
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
from jobrun.worker.lifecycle import Service, backoff_sleep
from jobrun.worker.notifier import Notifier

log = logging.getLogger("jobrun.scheduler")

DUE_BATCH = 100  # schedules looked at per pass


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, dsn: str | Connector, queries: Queries, owner: str, *, ttl: float = 10.0,
                 poll: float = 1.0, payload_limit: int = 1024 * 1024,
                 declared: Callable[[], Iterable[dict[str, Any]]] = list,
                 metrics: Any = None, on_db_error: Callable[[], None] | None = None,
                 notifier: Notifier | None = None) -> None:
        """``notifier``: a master's, whose connection then also listens for schedule changes
        (one listening backend per master); without one, the scheduler listens on its own."""
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.q = queries
        self.owner = owner
        self.ttl = ttl
        self.period = ttl / 3
        self.poll = poll
        self.payload_limit = payload_limit
        self.declared = declared
        self.metrics = metrics
        self.on_db_error = on_db_error
        self.leading = False
        self.term = 0
        self.deadline = 0.0        # monotonic: trust the lease until then
        self._renew_at = 0.0       # monotonic: next acquire/renew
        self._db_ref: datetime | None = None  # database clock at _mono_ref
        self._mono_ref = 0.0
        self._synced = False
        self._wake = asyncio.Event()
        self._conn: psycopg.AsyncConnection | None = None
        self.notifier: Notifier | None = None
        if notifier is not None:
            notifier.also(queries.listen_schedules, queries.schedules_channel, self.wake)
        else:
            self.notifier = Notifier(self.db, queries.listen_schedules, {""}, self.wake,
                                     on_db_error=on_db_error)

    def wake(self) -> None:
        self._wake.set()

    def reconfigure(self, settings) -> None:
        """A SIGHUP's lease TTL (from the next renewal on; the statement timeout that follows
        it, from the next connection) and payload limit."""
        self.ttl = settings.schedule_lease_ttl
        self.period = self.ttl / 3
        self.payload_limit = settings.max_payload_bytes

    # --- lifecycle ------------------------------------------------------------------------

    async def _run(self) -> None:
        if self.notifier is not None:
            self.notifier.start()
        failures = 0
        try:
            while True:
                try:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn = await self.db.connect()
                        # A statement may not outlive the time we trust our lease for.
                        await self._conn.execute(self.q.scheduler_statement_timeout,
                                                 {"ms": str(int(self.period * 1000))})
                    wait = await self.step()
                    failures = 0
                except (psycopg.Error, JobrunError, OSError) as exc:
                    failures += 1
                    self._step_down("database error")
                    self.db.failed(exc)
                    if self.on_db_error:
                        self.on_db_error()
                    event(log, logging.WARNING, "scheduler.failed", error=db.first_line(exc),
                          retry=failures)
                    await self._close()
                    await backoff_sleep(failures, cap=self.period)
                    continue
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, wait))
                except asyncio.TimeoutError:
                    pass
        finally:
            if self.notifier is not None:
                await self.notifier.stop()
            await self._release()
            await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    async def _release(self) -> None:
        """Give the lease up on a clean stop, so another master leads at once."""
        if not self.leading or self._conn is None or self._conn.closed:
            return
        self._step_down("stopping")
        try:
            await asyncio.wait_for(self._conn.execute(self.q.leader_release,
                                                      {"owner": self.owner}), self.period)
        except Exception as exc:  # noqa: BLE001 - the lease then just expires
            event(log, logging.WARNING, "scheduler.release_failed", error=db.first_line(exc))

    # --- one pass -------------------------------------------------------------------------

    async def step(self) -> float:
        """Renew or seek the lease when due, sync declared schedules once, fire what is due;
        returns how long to wait (seconds) before the next pass."""
        assert self._conn is not None
        if time.monotonic() >= self._renew_at:
            await self._elect()
        if not self._synced:
            await self._sync()
        wait = self._renew_at - time.monotonic()
        if self.leading:
            nxt = await self._fire_due()
            if nxt is not None:
                wait = min(wait, (nxt - self._db_now()).total_seconds())
        return max(0.0, min(wait, self.poll))

    def still_leading(self) -> bool:
        if self.leading and time.monotonic() >= self.deadline:
            self._step_down("lease deadline passed")
        return self.leading

    def _step_down(self, why: str) -> None:
        if self.leading:
            self.leading = False
            # A clean stop hands the lease over on purpose; anything else is worth a look.
            event(log, logging.INFO if why == "stopping" else logging.WARNING,
                  "scheduler.step_down", owner=self.owner, term=self.term, reason=why)
            if self.metrics:
                self.metrics.scheduler_leading.set(0)
        self._renew_at = min(self._renew_at, time.monotonic() + self.period)

    def _db_now(self) -> datetime:
        assert self._db_ref is not None
        return self._db_ref + timedelta(seconds=time.monotonic() - self._mono_ref)

    def _clock(self, db_now: datetime, sent: float) -> None:
        received = time.monotonic()
        self._db_ref, self._mono_ref = db_now, (sent + received) / 2

    async def _elect(self) -> None:
        sent = time.monotonic()
        cur = await self._conn.execute(self.q.leader_acquire, {"owner": self.owner, "ttl": self.ttl})
        row = await cur.fetchone()
        self._renew_at = sent + self.period
        if row is None:
            self._step_down("lease held by another master")
            cur = await self._conn.execute(self.q.db_now)
            self._clock((await cur.fetchone())["now"], sent)
            return
        self._clock(row["db_now"], sent)
        if not self.leading or row["term"] != self.term:
            event(log, logging.INFO, "scheduler.leading", owner=self.owner, term=row["term"])
            if self.metrics:
                self.metrics.scheduler_leader_changes.inc()
                self.metrics.scheduler_leading.set(1)
        self.leading, self.term = True, row["term"]
        self.deadline = sent + self.ttl - self.period

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
        cur = await self._conn.execute(self.q.schedules_due_soon, {"limit": DUE_BATCH})
        rows = await cur.fetchall()
        earliest: datetime | None = None
        for row in rows:
            now = row["db_now"]
            if row["next_fire_at"] > now:
                earliest = row["next_fire_at"] if earliest is None else min(earliest, row["next_fire_at"])
                break  # ordered by next fire: the rest are later still
            if not self.still_leading():
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
            "owner": self.owner, "term": self.term, "id": row["id"], "version": row["version"],
            "expected": row["next_fire_at"], "next_fire_at": d.next_at,
            "last_fire_at": d.fire[-1] if d.fire else None, "slots": d.fire})
        result = await cur.fetchone()
        if not result["advanced"]:
            # Lease lost, or the schedule changed meanwhile: ask the database who leads now.
            self._renew_at = time.monotonic()
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
