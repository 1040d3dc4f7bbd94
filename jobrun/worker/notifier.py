"""LISTEN for new jobs on one dedicated connection, reconnecting with backoff (through the
master's store.connector.Connector, which a lost or regained LISTEN reports to).

A notification (payload: the queue name) wakes the claimer at once; the claimer's poll floor
covers notifications lost while this connection was down, and every (re)connect wakes the
claimer too, so a dropped LISTEN costs at most one poll interval.

Other channels can share the connection (``also``: the scheduler's): PostgreSQL signals every
backend that listens in the database at each NOTIFY, whatever its channels, so each listening
connection of a master cost the database a wake-up per job enqueued.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import psycopg
from psycopg import pq

from jobrun.store import db
from jobrun.store.connector import Connector
from jobrun.worker.lifecycle import Service
from jobrun.logs import event

log = logging.getLogger("jobrun.notifier")


class Notifier(Service):
    name = "notifier"

    def __init__(self, dsn: str | Connector, listen: str, queues: set[str], wake: Callable[[], None],
                 on_db_error: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.db = Connector.of(dsn)  # a master's, or one of its own for a DSN
        self.listen = listen  # the LISTEN statement (query listen_ready)
        self.queues = queues
        self.wake = wake
        self.on_db_error = on_db_error
        self._also: dict[str, tuple[str, Callable[[], None]]] = {}  # channel: (LISTEN, wake)

    def also(self, listen: str, channel: str, wake: Callable[[], None]) -> None:
        """Listen on ``channel`` too (``listen``: its LISTEN statement), calling ``wake`` at each
        of its notifications and at every (re)connect. Before start."""
        self._also[channel] = (listen, wake)

    def reconfigure(self, settings) -> None:
        self.queues.clear()
        self.queues.update(settings.queues)

    async def _run(self) -> None:
        failures = 0
        while True:
            conn = None
            try:
                conn = await self.db.connect()
                for listen, _ in self._also.values():
                    await conn.execute(listen)
                await conn.execute(self.listen)  # last: the connection shows it as its query
                self.db.succeeded()
                if failures:
                    event(log, logging.INFO, "listen.reconnected", after_failures=failures)
                failures = 0
                for _, wake in self._also.values():
                    wake()
                self.wake()
                await self._notified(conn)
            except Exception as exc:  # noqa: BLE001 - whatever broke the connection: reconnect
                failures += 1
                self.db.failed(exc)
                if self.on_db_error:
                    self.on_db_error()
                event(log, logging.WARNING, "listen.lost", error=db.first_line(exc), retry=failures)
                await self.db.pause(failures)
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except Exception:
                        pass

    async def _notified(self, conn: psycopg.AsyncConnection) -> None:
        """Wake the claimer at every notification for a served queue, until the connection
        breaks (raises psycopg.OperationalError).

        Read from libpq as the socket becomes readable, without psycopg's ``notifies()``:
        that one takes the connection's lock and sets up a wait (a reader, a timer, a
        future) for every notification, which at a thousand jobs a second, each announced
        on its own, was a tenth of the master's CPU."""
        pgconn = conn.pgconn
        encoding = conn.info.encoding
        loop = asyncio.get_running_loop()
        broken: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                pgconn.consume_input()
                if pgconn.status != pq.ConnStatus.OK:
                    raise psycopg.OperationalError("the LISTEN connection was closed")
            except psycopg.OperationalError as exc:  # the connection is gone
                if not broken.done():
                    broken.set_exception(exc)
                return
            wake = False
            also = set()
            while (note := pgconn.notifies()) is not None:
                other = (self._also.get(note.relname.decode(encoding, "replace"))
                         if self._also else None)
                if other is not None:
                    also.add(other[1])
                else:
                    wake = wake or note.extra.decode(encoding, "replace") in self.queues
            for other_wake in also:
                other_wake()
            if wake:
                self.wake()

        loop.add_reader(pgconn.socket, readable)
        try:
            await broken
        finally:
            loop.remove_reader(pgconn.socket)
