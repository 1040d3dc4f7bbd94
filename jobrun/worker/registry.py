"""The worker registry and the queue-depth cache, refreshed every few seconds.

Each master keeps one row in ``workers`` (host, pid, app, queues, concurrency, busy children,
in-flight jobs, version, started, last seen) and deletes it when it stops; rows of masters
that died without a word go stale and are purged by any master. The same loop refreshes the
cached queue depth that /metrics serves, so a scrape never queries the database; with a deep
backlog that count is refreshed less often, so that the counts of all live masters together
take no more than a tenth of one master's time (each of M masters counts M times less often).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Callable

import psycopg

from jobrun.store import db
from jobrun.worker.lifecycle import Service, backoff_sleep, reconnect_if_broken
from jobrun.logs import event
from jobrun.sql import Queries

log = logging.getLogger("jobrun.registry")
STALE_AFTER = 30.0


def depth_pause(interval: float, took: float, masters: int) -> float:
    """Seconds until the next queue-depth count: counting a deep backlog is not free, and every
    live master counts the same rows, so together they spend at most a tenth of the time."""
    return max(interval, 10 * took * max(1, masters))


class Registry(Service):
    name = "registry"

    def __init__(self, dsn: str, queries: Queries, row: Callable[[], dict],
                 on_depth: Callable[[list[dict]], None], interval: float = 2.0,
                 on_error: Callable[[], None] | None = None,
                 on_db_ok: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.dsn = dsn
        self.q = queries
        self.row = row
        self.on_depth = on_depth
        self.interval = interval
        self.on_error = on_error
        self.on_db_ok = on_db_ok
        self._conn: psycopg.AsyncConnection | None = None
        self._next_depth = 0.0

    async def _connection(self) -> psycopg.AsyncConnection:
        self._conn = await reconnect_if_broken(self._conn, self.dsn)
        return self._conn

    async def refresh(self) -> None:
        conn = await self._connection()
        row = self.row()
        row["inflight"] = json.dumps(row["inflight"])
        await conn.execute(self.q.registry_upsert, row)
        cur = await conn.execute(self.q.registry_purge_stale, {"stale": STALE_AFTER})
        live = (await cur.fetchone())["live"]
        if time.monotonic() >= self._next_depth:
            started = time.monotonic()
            cur = await conn.execute(self.q.metrics_queue_depth)
            self.on_depth(await cur.fetchall())
            self._next_depth = time.monotonic() + depth_pause(
                self.interval, time.monotonic() - started, live)

    async def _run(self) -> None:
        failures = 0
        try:
            while True:
                try:
                    await self.refresh()
                    failures = 0
                    if self.on_db_ok:
                        self.on_db_ok()  # /healthz: the database was reached just now
                except Exception as exc:  # noqa: BLE001 - log, back off, go on
                    failures += 1
                    if self.on_error:
                        self.on_error()
                    event(log, logging.WARNING, "registry.failed", error=db.first_line(exc),
                          retry=failures)
                    await backoff_sleep(failures)
                    continue
                await asyncio.sleep(self.interval)  # the refresh period
        finally:
            await self._leave()

    async def _leave(self) -> None:
        try:
            conn = await self._connection()
            await conn.execute(self.q.registry_delete, {"owner": self.row()["owner"]})
        except Exception as exc:  # noqa: BLE001 - the row goes stale and is purged anyway
            event(log, logging.WARNING, "registry.leave_failed", error=db.first_line(exc))
        finally:
            if self._conn is not None:
                await self._conn.close()
                self._conn = None
