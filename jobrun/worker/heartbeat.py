"""The heartbeater: a thread of the master, with its own connection, that keeps leases alive
and is the one place that fences.

Lease states of one in-flight job, as this thread sees it::

    dispatched --renewed--> held --renewed--> held ...
        |                     |
        |  row missing from the heartbeat's answer (reaped, re-claimed, retried by hand)
        |  or no good renewal before  last renewal + TTL - period  (monotonic clock)
        v                     v
      fenced: SIGUSR1 to the child (its handler sees LeaseLost), SIGKILL after a grace;
              the master records nothing for that attempt

    held --cancel_requested--> SIGUSR2 to the child (its handler sees Cancelled)

A child with slots (--slots > 1) runs several jobs at once, so a signal would reach the wrong
one: its jobs are interrupted by an interrupt frame naming the job instead (``interrupt``),
and a job that does not stop within the grace gets its child killed all the same.

A beat renews every lease at once, once a period; a dropped connection is retried at once,
within the beat. A beat whose renewal failed is followed sooner than a period, while a renewal
can still be in time (policy.retry_wait): the deadline is only two periods after the last
good renewal, so waiting a whole period would leave no time to try again.

A thread rather than a task so that a stalled event loop cannot let leases lapse silently;
and conversely, when the loop has not ticked for a whole period the thread stops renewing,
so leases are not kept alive for work whose results could not be recorded anyway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

import psycopg

from jobrun.store import db
from jobrun.store.connector import HEARTBEATS, Connector
from jobrun.logs import event
from jobrun.policy import fence_grace, heartbeat_period, lease_deadline, retry_wait
from jobrun.sql import Queries
from jobrun.worker.lifecycle import Service

log = logging.getLogger("jobrun.heartbeat")


@dataclass(frozen=True)
class Lease:
    id: int
    token: int
    child: object  # supervisor.Child: has .signal(signum)
    since: float  # monotonic time of the claim
    alive: bool = True  # the child reported itself running within the last period
    framed: bool = False  # its child has slots: interrupted by a frame, not a signal


def _cut(conn: psycopg.Connection) -> None:
    """Shut the connection's socket down (from the timer thread): a call blocked on it fails."""
    try:
        fd = conn.fileno()
    except Exception:  # noqa: BLE001 - already closed: nothing blocks on it
        return
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _running(lease: Lease) -> bool:
    """Whether the lease's child is running that attempt now (signals reach only that one)."""
    running = getattr(lease.child, "running", None)
    if running is None:
        return True
    job = running.get(lease.id)
    return job is not None and job.token == lease.token


class Heartbeater(Service):
    """A Service whose work runs in its own thread: ``start()`` starts the thread, ``stop()``
    asks it to end and waits for it (off the event loop); a crash in the thread is a crash of
    the service."""

    name = "heartbeater"

    def __init__(self, dsn: str | Connector | None, queries: Queries, owner: str, ttl: float,
                 leases: Callable[[], list[Lease]], loop_alive: Callable[[float], bool],
                 on_fence: Callable[[Lease, str], None], grace: float | None = None,
                 on_db_error: Callable[[], None] | None = None,
                 on_db_ok: Callable[[], None] | None = None,
                 interrupt: Callable[[Lease, str], None] | None = None) -> None:
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self._session = self.db.sync_session(HEARTBEATS)  # used by the thread alone
        self.q = queries
        self.owner = owner
        self.ttl = ttl
        self.period = heartbeat_period(ttl)
        self._fixed_grace = grace
        self.grace = grace if grace is not None else fence_grace(ttl)
        self.leases = leases
        self.loop_alive = loop_alive
        self.on_fence = on_fence
        self.on_db_error = on_db_error
        self.on_db_ok = on_db_ok
        self.interrupt = interrupt  # (lease, why): a frame to a child with slots
        self.clock = time.monotonic  # injected by tests that drive tick() themselves
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed: dict[tuple[int, int], float] = {}
        self._fenced: dict[tuple[int, int], float] = {}  # -> kill deadline
        self._cancel_sent: set[tuple[int, int]] = set()
        self._retry_due: float | None = None  # the last renewal failed: the first deadline
        self.fenced_total = 0
        self.beats = 0
        self.failures = 0

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def _conn(self) -> psycopg.Connection | None:
        """The thread's connection, while there is one (tests read its plans)."""
        return self._session.conn

    def reconfigure(self, settings) -> None:
        # Plain attribute writes: the thread reads them at its next beat.
        self.ttl = settings.lease_ttl
        self.period = heartbeat_period(self.ttl)
        if self._fixed_grace is None:
            self.grace = fence_grace(self.ttl)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()

        def main() -> None:
            try:
                self._beat_until_stopped()
            except BaseException as exc:  # noqa: BLE001 - reported as the service's crash
                # Bound now: the name ``exc`` is gone once this block ends, before the loop
                # runs the callback.
                loop.call_soon_threadsafe(lambda exc=exc: done.done() or done.set_exception(exc))
            else:
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

        self._thread = threading.Thread(target=main, name="heartbeat", daemon=True)
        self._thread.start()
        await done

    def _interrupt(self) -> None:
        self._stop.set()  # the thread ends after its current beat; _run then returns

    def _beat_until_stopped(self) -> None:
        try:
            while not self._stop.wait(self._next_wait()):
                self.tick(self.clock())
        finally:
            self._session.close()

    def _next_wait(self) -> float:
        wait = self.period
        if self._retry_due is not None:  # the last renewal failed: try again while time is left
            wait = retry_wait(self.period, self.clock(), self._retry_due)
        # Wake for kills due before the next beat, too.
        if self._fenced:
            return max(0.01, min(wait, min(self._fenced.values()) - self.clock()))
        return wait

    # --- one beat -------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        leases = self.leases()
        live = {(lease.id, lease.token) for lease in leases}
        for key in [k for k in self._renewed if k not in live]:
            del self._renewed[key]
        self._cancel_sent &= live
        self._kill_overdue(leases, now)
        todo = [lease for lease in leases if (lease.id, lease.token) not in self._fenced]
        if not todo:
            self._retry_due = None
            return
        if not self.loop_alive(self.period):
            event(log, logging.WARNING, "heartbeat.skipped", reason="event loop stalled",
                  leases=len(todo))
        else:
            stalled = [lease for lease in todo if not lease.alive]
            if stalled:
                event(log, logging.WARNING, "heartbeat.child_silent", jobs=[lease.id for lease in stalled],
                      note="not renewing leases of children that stopped reporting")
            if self._renew([lease for lease in todo if lease.alive], now):
                now = self.clock()  # the renewal may have taken its whole budget
        for lease in todo:
            last = self._renewed.get((lease.id, lease.token), lease.since)
            if now > lease_deadline(last, self.ttl, self.period):
                self._fence(lease, "not renewed in time", now)

    def _renew(self, leases: list[Lease], now: float) -> bool:
        """Renew ``leases`` (fencing the ones the database no longer gives this master);
        whether a renewal was tried."""
        if not leases:
            return False
        rows = None
        # The renewal must answer before the first of these leases is due to be fenced (and
        # within most of a period): a connection that hangs (a half-open TCP path, a frozen
        # server) is cut at that point, so this thread always gets to its fencing decisions.
        due = min(lease_deadline(self._renewed.get((l.id, l.token), l.since), self.ttl, self.period)
                  for l in leases)
        deadline = min(now + 0.8 * self.period, due)
        self._retry_due = due  # until the renewal went through
        for retry in (False, True):  # a dropped connection is retried once, if time allows
            if deadline - self.clock() <= 0.05:
                event(log, logging.WARNING, "heartbeat.failed", error="no time left to renew",
                      leases=len(leases), reconnect=False)
                return True
            try:
                rows = self._execute_renewal(leases, deadline)
                break
            except Exception as exc:  # noqa: BLE001 - database trouble: the deadline decides
                self.failures += 1
                self.db.failed(exc)
                if self.on_db_error:
                    self.on_db_error()
                broken = not self._session.usable
                event(log, logging.WARNING, "heartbeat.failed", error=db.first_line(exc),
                      leases=len(leases), reconnect=broken and not retry)
                if broken:
                    self._session.drop()
                if retry or not broken:
                    return True
        if rows is None:
            return True
        self._retry_due = None
        self.beats += 1
        self.db.succeeded()
        if self.on_db_ok:
            self.on_db_ok()
        held = {row["id"]: row["cancel_requested"] for row in rows}
        lost = []
        for lease in leases:
            key = (lease.id, lease.token)
            if lease.id not in held:
                if self._fence(lease, "lease lost", now):
                    lost.append(lease)
                continue
            self._renewed[key] = now
            if held[lease.id] and key not in self._cancel_sent and _running(lease):
                self._cancel_sent.add(key)
                event(log, logging.INFO, "job.cancel_signalled", job=lease.id)
                self._tell(lease, "cancel", signal.SIGUSR2)
        if lost:
            self._note_lost(lost)
        return True

    def _note_lost(self, lost: list[Lease]) -> None:
        """Write a ``lease_lost`` event for each lease this beat found lost, once its child
        was signalled (migration 0017: a lost lease changes no row, so no trigger sees it).
        Not retried: the log then lacks that line, and the job's own transitions stand."""
        try:
            timeout_ms = int(max(0.5, self.period * 0.8) * 1000)
            conn = self._session.get({"statement_timeout": str(timeout_ms)})
            conn.execute(self.q.note_lease_lost, {
                "ids": [lease.id for lease in lost], "tokens": [lease.token for lease in lost],
                "owner": self.owner, "reason": "renewal refused: the lease was lost"})
        except Exception as exc:  # noqa: BLE001 - a note; the fence is what matters
            event(log, logging.WARNING, "heartbeat.note_failed", error=db.first_line(exc),
                  leases=len(lost))

    def _fence(self, lease: Lease, reason: str, now: float) -> bool:
        """Fence the attempt ``lease`` names if its child runs it; whether it did now."""
        key = (lease.id, lease.token)
        if key in self._fenced:
            return False
        # The snapshot may be older than the job's result: a job completed while the renewal
        # ran is missing from its answer too. Its child may already run the next job, which a
        # SIGUSR1 would interrupt (and that lease would then lapse): fence only the attempt
        # the child runs. One still waiting in its pipe is fenced when it starts (a later beat).
        if not _running(lease):
            return False
        self._fenced[key] = now + self.grace
        self.fenced_total += 1
        self.on_fence(lease, reason)
        self._tell(lease, "lease_lost", signal.SIGUSR1)
        return True

    def _tell(self, lease: Lease, why: str, signum: int) -> None:
        if lease.framed and self.interrupt is not None:
            self.interrupt(lease, why)
        else:
            lease.child.signal(signum)

    def _execute_renewal(self, leases: list[Lease], deadline: float) -> list[dict]:
        """Renew ``leases`` by ``deadline`` (monotonic), or raise. The server's
        statement_timeout cannot bound a connection whose packets go nowhere, so a timer cuts
        the socket itself at the deadline (the blocked call then fails at once)."""
        # The settings and the timeout apply when a connection is opened (the statement
        # timeout follows the period, which a SIGHUP may change). libpq's connect_timeout is
        # whole seconds (2 at least): a connect may overrun the deadline by that much, and then
        # the statement is not tried.
        timeout_ms = int(max(0.5, self.period * 0.8) * 1000)
        conn = self._session.get({"statement_timeout": str(timeout_ms)},
                                 connect_timeout=max(2, int(deadline - self.clock() + 1)))
        timer = threading.Timer(max(0.0, deadline - self.clock()), _cut, args=(conn,))
        timer.daemon = True
        timer.start()
        try:
            return conn.execute(self.q.heartbeat, {
                "ids": [lease.id for lease in leases], "tokens": [lease.token for lease in leases],
                "owner": self.owner, "ttl": self.ttl}).fetchall()
        finally:
            timer.cancel()

    def _kill_overdue(self, leases: list[Lease], now: float) -> None:
        by_key = {(lease.id, lease.token): lease for lease in leases}
        for key, deadline in list(self._fenced.items()):
            lease = by_key.get(key)
            if lease is None:  # the child answered (or died): the fence is complete
                del self._fenced[key]
            elif now >= deadline:
                event(log, logging.ERROR, "child.fence_kill", job=key[0],
                      reason="did not stop after LeaseLost within the grace period")
                lease.child.signal(signal.SIGKILL)
                self._fenced[key] = float("inf")  # killed; forgotten once the lease is gone
