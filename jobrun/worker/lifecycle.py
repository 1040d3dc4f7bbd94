"""The one lifecycle every long-lived part of the master shares, and the database idiom they
share.

``start()`` launches the part's coroutine as a task; ``stop()`` is safe twice and safe before
``start()``, and returns only once the part has stopped (``stop(timeout)`` lets it finish what
it is doing for that long, then cancels it). A part whose coroutine raises is a crashed part:
it logs ``service.crashed`` and calls ``on_crash`` (the master then stops with exit code 1;
a half-alive master that claims jobs whose outcomes are never written is worse than none).
``reconfigure(settings)`` applies new settings (SIGHUP) to the running part.

``Parts`` is the master's one list of its parts, in start order: each says the phase that
starts it and the teardown stage that stops it, and a reload reaches every one. Start-up,
reload and teardown all walk it, so a part cannot be left out of one of them. A part is a
``Service`` or anything with the same three verbs (the fork servers).

``PeriodicDbService`` is a part that does one unit of database work at a time on a connection
of its own (the reaper, the aging sweeper, the worker registry): it reconnects when the
connection broke, logs a failed unit and retries it after a backoff, and waits as long as the
unit asks between units. Its connection, backoff and health reports go through the master's
store.connector.Connector.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

import psycopg

from jobrun.logs import event
from jobrun.store import db
from jobrun.store.connector import BASE, CAP, Connector, backoff

log = logging.getLogger("jobrun.master")


class Service:
    name = "service"

    def __init__(self) -> None:
        self._task: asyncio.Task | None = None
        self.stopping = False
        self.on_crash: Callable[["Service", BaseException], None] | None = None

    async def _run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def reconfigure(self, settings: Any) -> None:
        """Apply new settings to the running part (the default: nothing depends on them)."""

    def _interrupt(self) -> None:
        """Ask the running part to stop (the default: cancel its coroutine)."""
        assert self._task is not None
        self._task.cancel()

    async def _guarded(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self.stopping:
                raise
            event(log, logging.CRITICAL, "service.crashed", service=self.name,
                  error=db.first_line(exc), note="stopping the master (exit code 1)")
            log.exception("service %s crashed", self.name)
            if self.on_crash is not None:
                self.on_crash(self, exc)
            raise

    def start(self) -> None:
        if self._task is None and not self.stopping:
            self._task = asyncio.get_running_loop().create_task(self._guarded(), name=self.name)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self, timeout: float | None = None) -> None:
        self.stopping = True
        task = self._task
        if task is None:
            return
        if not task.done():
            if timeout is None:
                self._interrupt()
            else:
                self._interrupt_gently()
                await asyncio.wait([task], timeout=timeout)
                if not task.done():
                    task.cancel()
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: a crash was already reported

    def _interrupt_gently(self) -> None:
        """Ask the part to finish what it is doing and stop (the default: at once)."""
        self._interrupt()


class Part(Protocol):
    """What the master's list holds: a part that starts, takes new settings and stops."""

    name: str

    def start(self) -> None: ...

    def reconfigure(self, settings: Any) -> None: ...

    async def stop(self, timeout: float | None = None) -> None: ...


@dataclass(frozen=True)
class Entry:
    part: Part
    starts: str  # the start-up phase that starts it (Parts.PHASES)
    stops: int  # the teardown stage that stops it (worker/teardown.py)


class Parts:
    """The master's parts in start order (the teardown stops each stage's in reverse)."""

    # "first": before any thread or connection of the master; "boot": before the first child is
    # ready; "serve": once one is (claiming, leases, maintenance).
    PHASES = ("first", "boot", "serve")

    def __init__(self, entries: list[Entry],
                 on_crash: Callable[[Service, BaseException], None]) -> None:
        for entry in entries:
            assert entry.starts in self.PHASES, entry
            if isinstance(entry.part, Service):
                entry.part.on_crash = on_crash
        self.entries = entries

    def __iter__(self) -> Iterator[Part]:
        return (entry.part for entry in self.entries)

    def start(self, phase: str) -> None:
        for entry in self.entries:
            if entry.starts == phase:
                entry.part.start()

    def reconfigure(self, settings: Any) -> None:
        for part in self:
            part.reconfigure(settings)

    async def stop(self, stage: int, timeout: float | None = None) -> None:
        """Stop the parts of teardown stage ``stage``, the last started first."""
        for entry in reversed(self.entries):
            if entry.stops == stage:
                await entry.part.stop(timeout)


class PeriodicDbService(Service):
    """Runs ``tick(conn)`` again and again on a connection of its own, waiting the seconds it
    returns between two. A tick that raises (the database away, a statement refused) is logged
    as ``<name>.failed`` on ``logger``, counted by ``on_db_error`` and in the master's database
    health, and retried after a backoff that grows with consecutive failures, on a new
    connection if the old one broke (store.connector). A tick that went through counts as a
    good round trip (and calls ``on_db_ok``); when the part stops, ``finish(conn)`` runs before
    its connection is closed."""

    logger = log

    def __init__(self, dsn: "str | Connector", on_db_error: Callable[[], None] | None = None,
                 on_db_ok: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.on_db_error = on_db_error
        self.on_db_ok = on_db_ok

    async def tick(self, conn: psycopg.AsyncConnection) -> float:  # pragma: no cover - abstract
        """One unit of work; returns the seconds to wait before the next."""
        raise NotImplementedError

    async def finish(self, conn: psycopg.AsyncConnection | None) -> None:
        """Last words when the part stops (``conn``: its connection, broken or None)."""

    async def _run(self) -> None:
        failures = 0
        session = self.db.session()
        try:
            while True:
                try:
                    wait = await self.tick(await session.get())
                    failures = 0
                    self.db.succeeded()
                    if self.on_db_ok:
                        self.on_db_ok()
                except Exception as exc:  # noqa: BLE001 - log, back off, go on
                    failures += 1
                    self.db.failed(exc)
                    if self.on_db_error:
                        self.on_db_error()
                    event(self.logger, logging.WARNING, f"{self.name}.failed",
                          error=db.first_line(exc), retry=failures)
                    await self.db.pause(failures)
                    continue
                await asyncio.sleep(wait)  # the part's period
        finally:
            try:
                await self.finish(session.conn)
            finally:
                await session.close()


async def backoff_sleep(attempt: int, base: float = BASE, cap: float = CAP) -> None:
    """Wait before retrying a failed database operation (a retry pause, not synchronisation):
    store.connector.backoff, jittered."""
    await asyncio.sleep(backoff(attempt, random.random(), base, cap))

