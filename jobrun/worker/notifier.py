"""LISTEN for new jobs on one dedicated connection, reconnecting with backoff.

A notification (payload: the queue name) wakes the claimer at once; the claimer's poll floor
covers notifications lost while this connection was down, and every (re)connect wakes the
claimer too, so a dropped LISTEN costs at most one poll interval.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import psycopg
from psycopg import pq

from jobrun.store import db
from jobrun.worker.lifecycle import Service, backoff_sleep
from jobrun.logs import event

log = logging.getLogger("jobrun.notifier")


class Notifier(Service):
    name = "notifier"

    def __init__(self, dsn: str, listen: str, queues: set[str], wake: Callable[[], None],
                 on_db_error: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.dsn = dsn
        self.listen = listen  # the LISTEN statement (query listen_ready)
        self.queues = queues
        self.wake = wake
        self.on_db_error = on_db_error

    def reconfigure(self, settings) -> None:
        self.queues.clear()
        self.queues.update(settings.queues)

    async def _run(self) -> None:
        failures = 0
        while True:
            conn = None
            try:
                conn = await db.connect_async(self.dsn)
                await conn.execute(self.listen)
                if failures:
                    event(log, logging.INFO, "listen.reconnected", after_failures=failures)
                failures = 0
                self.wake()
                await self._notified(conn)
            except Exception as exc:  # noqa: BLE001 - whatever broke the connection: reconnect
                failures += 1
                if self.on_db_error:
                    self.on_db_error()
                event(log, logging.WARNING, "listen.lost", error=db.first_line(exc), retry=failures)
                await backoff_sleep(failures)
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
            while (note := pgconn.notifies()) is not None:
                wake = wake or note.extra.decode(encoding, "replace") in self.queues
            if wake:
                self.wake()

        loop.add_reader(pgconn.socket, readable)
        try:
            await broken
        finally:
            loop.remove_reader(pgconn.socket)
