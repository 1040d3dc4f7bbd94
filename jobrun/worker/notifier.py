"""LISTEN for new jobs on one dedicated connection, reconnecting with backoff.

A notification (payload: the queue name) wakes the claimer at once; the claimer's poll floor
covers notifications lost while this connection was down, and every (re)connect wakes the
claimer too, so a dropped LISTEN costs at most one poll interval.
"""

from __future__ import annotations

import logging
from typing import Callable

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
                async for note in conn.notifies():
                    if note.payload in self.queues:
                        self.wake()
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
