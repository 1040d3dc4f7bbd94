"""The elector: one master leads the cluster at a time, by a lease in the database.

The leader fires the schedules (worker/scheduler.py) and runs the cluster's maintenance: the
reaper (expired leases, stale transactional sessions, the retention purge), the registry's
purge of stale rows and the aging sweeper. Every master runs an elector; the parts ask it.

The lease is the ``scheduler_leader`` row (its name is older than the elector), on the
database clock::

    follower --acquire (row free or expired)--> leader --renew every `period`--> leader
       ^                                          |
       +---- renewal failed, refused, or the local deadline passed (step down at once)

* A leader renews every ``period`` = ttl / 3; each renewal sets ``expires_at = now() + ttl``.
* It trusts its lease only until ``deadline`` = (monotonic time the renewal was *sent*) +
  ttl - period: the database set its expiry after that send, so the leader stops acting one
  period before the database could hand the lease to anyone else. A SIGSTOPped leader wakes
  past its deadline and steps down before it acts (``still_leading()`` is asked before every
  act, and the parts that run while leading are cancelled at the deadline).
* A follower tries to acquire every ``period``; a lease expires at most ttl after its holder
  stopped renewing, so a dead or frozen leader is replaced within ttl + period (plus one
  statement). Nothing is held by a session: the database ends nothing, and a frozen process
  blocks no one (no advisory lock, no open transaction between statements). Every statement
  of the elector's session is bounded by ``period`` (statement_timeout).
* A clean stop deletes the row, so another master leads at its next try (within a period).

What the lease guards. The scheduler's fire statement checks the row itself (owner, term,
expiry, locked FOR SHARE): a stale leader's fire changes nothing. The maintenance statements
are guarded by their own rows (a lease's token and expiry on the database clock, a row's age)
and are safe to run twice or concurrently; the lease only spares the cluster running them N
times over. A stale leader that acts once more before it notices does no harm.

During a change of leader no maintenance runs for at most ttl + period: a job whose lease
expires then is reaped within ttl + period + one reap interval of the old leader's end, by
the new leader, which starts its maintenance at once (``while_leading``).

``Lease`` is the pure part (times are monotonic seconds passed in); ``Elector`` the I/O.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import psycopg

from jobrun.errors import JobrunError
from jobrun.logs import event
from jobrun.sql import Queries
from jobrun.store import db
from jobrun.store.connector import Connector
from jobrun.worker.lifecycle import Service, backoff_sleep

log = logging.getLogger("jobrun.scheduler")  # the events keep their names: scheduler.leading


@dataclass
class Lease:
    """What this process may believe about the leader lease, as a function of its moves and
    the monotonic time; no I/O. ``renew_at``: when to send the next acquire or renewal."""

    ttl: float
    leading: bool = False
    term: int = 0
    deadline: float = 0.0
    renew_at: float = 0.0

    @property
    def period(self) -> float:
        return self.ttl / 3

    def granted(self, term: int, sent: float) -> bool:
        """The acquire/renewal sent at ``sent`` returned the lease with ``term``; returns
        whether this starts a new leadership (we did not lead, or another term)."""
        new = not self.leading or term != self.term
        self.leading, self.term = True, term
        self.deadline = sent + self.ttl - self.period
        self.renew_at = sent + self.period
        return new

    def refused(self, sent: float) -> bool:
        """The acquire sent at ``sent`` found the lease held by another; returns whether we
        were leading (and so step down now)."""
        self.renew_at = sent + self.period
        return self.lose(sent)

    def lose(self, now: float) -> bool:
        """Stop leading (an error, a refusal, the deadline); the next try comes within a
        period. Returns whether we were leading."""
        was, self.leading = self.leading, False
        self.renew_at = min(self.renew_at, now + self.period)
        return was

    def trusted(self, now: float) -> bool:
        """Whether we may act as leader at ``now``."""
        return self.leading and now < self.deadline

    def due(self, now: float) -> bool:
        return now >= self.renew_at


def lease_bound(period: float) -> dict[str, str]:
    """The server settings of a connection that acts on the lease: no statement outlives the
    time the lease is trusted for."""
    return {"statement_timeout": str(int(period * 1000))}


class Elector(Service):
    name = "elector"

    def __init__(self, dsn: str | Connector, queries: Queries, owner: str, *, ttl: float = 10.0,
                 metrics: Any = None, on_db_error: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.q = queries
        self.owner = owner
        self.lease = Lease(ttl)
        self.metrics = metrics
        self.on_db_error = on_db_error
        self.clock = clock
        self._subscribers: list[Callable[[], None]] = []
        self._elected = asyncio.Event()   # set while leading
        self._changed = asyncio.Event()   # set at every step down (waiters re-check)
        self.step_downs = 0               # counted: a waiter misses none, even if re-elected
        self._nudge = asyncio.Event()     # ask the database again now
        self._nudged = False              # this round answers a recheck(): tell the parts
        self._session = self.db.session()

    @property
    def ttl(self) -> float:
        return self.lease.ttl

    def reconfigure(self, settings) -> None:
        """A SIGHUP's lease TTL, from the next renewal on (and the statement timeout that
        follows it, from the next connection)."""
        self.lease.ttl = settings.schedule_lease_ttl

    @property
    def period(self) -> float:
        return self.lease.period

    @property
    def term(self) -> int:
        return self.lease.term

    @property
    def leading(self) -> bool:
        return self.lease.leading

    def subscribe(self, callback: Callable[[], None]) -> None:
        """``callback()`` after every election, step down and re-check (a part wakes up)."""
        self._subscribers.append(callback)

    def still_leading(self) -> bool:
        """Whether this master may act as leader now; steps down once the deadline passed."""
        if self.lease.leading and not self.lease.trusted(self.clock()):
            self.step_down("lease deadline passed")
        return self.lease.leading

    def recheck(self) -> None:
        """Ask the database who leads at once (a guarded statement was refused)."""
        self.lease.renew_at = self.clock()
        self._nudge.set()

    def step_down(self, why: str) -> None:
        if self.lease.lose(self.clock()):
            # A clean stop hands the lease over on purpose; anything else is worth a look.
            event(log, logging.INFO if why == "stopping" else logging.WARNING,
                  "scheduler.step_down", owner=self.owner, term=self.term, reason=why)
            if self.metrics:
                self.metrics.scheduler_leading.set(0)
            self.step_downs += 1
            self._elected.clear()
            self._changed.set()
            self._notify()

    def _notify(self) -> None:
        for callback in self._subscribers:
            callback()

    # --- waiting on the lease (for the parts that run while leading) -----------------------

    async def wait_elected(self) -> None:
        while not self.still_leading():
            await self._elected.wait()

    async def wait_lost(self, also: asyncio.Future | None = None) -> None:
        """Return once this master stepped down (or its deadline passed), even if elected
        again meanwhile, or when ``also`` is done."""
        seen = self.step_downs
        while (self.still_leading() and self.step_downs == seen
               and not (also is not None and also.done())):
            self._changed.clear()
            waits = [asyncio.ensure_future(self._changed.wait())]
            if also is not None:
                waits.append(also)
            try:
                await asyncio.wait(waits, timeout=max(0.0, self.lease.deadline - self.clock()),
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                waits[0].cancel()

    # --- one round trip ---------------------------------------------------------------------

    async def elect(self, conn: psycopg.AsyncConnection) -> bool:
        """Acquire or renew the lease once on ``conn``; returns whether we lead."""
        sent = self.clock()
        cur = await conn.execute(self.q.leader_acquire, {"owner": self.owner, "ttl": self.ttl})
        row = await cur.fetchone()
        nudged, self._nudged = self._nudged, False
        if row is None:
            if self.lease.leading:
                self.step_down("lease held by another master")
            self.lease.refused(sent)
            if nudged:
                self._notify()
            return False
        if self.lease.granted(row["term"], sent):
            event(log, logging.INFO, "scheduler.leading", owner=self.owner, term=row["term"])
            if self.metrics:
                self.metrics.scheduler_leader_changes.inc()
                self.metrics.scheduler_leading.set(1)
            self._elected.set()
            self._notify()
        elif nudged:
            self._notify()
        return True

    # --- lifecycle ------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        try:
            while True:
                try:
                    # A statement may not outlive the time we trust our lease for.
                    conn = await self._session.get(lease_bound(self.period))
                    if self.lease.due(self.clock()):
                        self._nudged = self._nudge.is_set()
                        self._nudge.clear()
                        await self.elect(conn)
                    failures = 0
                except (psycopg.Error, JobrunError, OSError) as exc:
                    failures += 1
                    self.step_down("database error")
                    self.db.failed(exc)
                    if self.on_db_error:
                        self.on_db_error()
                    event(log, logging.WARNING, "scheduler.failed", error=db.first_line(exc),
                          retry=failures)
                    await self._session.close()
                    await backoff_sleep(failures, cap=self.period)
                    continue
                try:
                    await asyncio.wait_for(self._nudge.wait(),
                                           max(0.0, self.lease.renew_at - self.clock()))
                except asyncio.TimeoutError:
                    pass
        finally:
            await self._release()
            await self._session.close()

    async def _release(self) -> None:
        """Give the lease up on a clean stop, so another master leads at once."""
        conn = self._session.conn
        if not self.lease.leading or conn is None or conn.closed:
            return
        self.step_down("stopping")
        try:
            await asyncio.wait_for(conn.execute(self.q.leader_release,
                                                      {"owner": self.owner}), self.period)
        except Exception as exc:  # noqa: BLE001 - the lease then just expires
            event(log, logging.WARNING, "scheduler.release_failed", error=db.first_line(exc))


async def while_leading(leader: Elector | None, body: Callable[[], Awaitable[None]],
                        part: str = "part") -> None:
    """Run ``body()`` while this master leads: start it at each election, cancel it when the
    master steps down (or its lease deadline passes). Without a leader, just run it. A body
    that ends by itself ends this too (its exception raised here: the part crashed)."""
    if leader is None:
        await body()
        return
    while True:
        await leader.wait_elected()
        event(log, logging.DEBUG, "leader.part_started", part=part, term=leader.term)
        task = asyncio.ensure_future(body())
        try:
            await leader.wait_lost(also=task)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task])
        if task.done() and not task.cancelled():
            task.result()
            return
        event(log, logging.DEBUG, "leader.part_stopped", part=part)
