"""The worker registry and the queue-depth cache, refreshed every few seconds.

Each master keeps one row in ``workers`` (host, pid, app, queues, concurrency, busy children,
in-flight jobs, version, started, last seen) and deletes it when it stops, or when the master
took a new owner id after a failover (``retired``: the old id's row); rows of masters
that died without a word go stale and are purged by the cluster's leader (worker/leader.py).
The same loop refreshes the
cached queue depth that /metrics serves, so a scrape never queries the database; with a deep
backlog that count is refreshed less often, so that the counts of all live masters together
take no more than a tenth of one master's time (each of M masters counts M times less often).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable

import psycopg

from jobrun.store import db
from jobrun.worker.leader import Elector
from jobrun.worker.lifecycle import PeriodicDbService
from jobrun.logs import event
from jobrun.sql import Queries

log = logging.getLogger("jobrun.registry")
STALE_AFTER = 30.0
LIVE_REFRESH = 10.0  # a follower's count of the live masters (for the depth pause) is this fresh


def depth_pause(interval: float, took: float, masters: int) -> float:
    """Seconds until the next queue-depth count: counting a deep backlog is not free, and every
    live master counts the same rows, so together they spend at most a tenth of the time."""
    return max(interval, 10 * took * max(1, masters))


class Registry(PeriodicDbService):
    name = "registry"
    logger = log

    def __init__(self, dsn: str, queries: Queries, row: Callable[[], dict],
                 on_depth: Callable[[list[dict]], None], interval: float = 2.0,
                 on_error: Callable[[], None] | None = None,
                 on_db_ok: Callable[[], None] | None = None,
                 leader: Elector | None = None) -> None:
        # on_db_ok: /healthz, the database was reached just now
        super().__init__(dsn, on_db_error=on_error, on_db_ok=on_db_ok)
        self.leader = leader  # purges stale rows while it leads (None: always)
        self.q = queries
        self.row = row
        self.on_depth = on_depth
        self.interval = interval
        self._next_depth = 0.0
        self.live = 1                      # masters live, as last counted
        self.retired: set[str] = set()     # this master's former owner ids, whose rows go
        self._live_at = float("-inf")      # monotonic: when

    async def tick(self, conn: psycopg.AsyncConnection) -> float:
        row = self.row()
        row["inflight"] = json.dumps(row["inflight"])
        row.update(self.db.health.report().as_row())  # and its database health (connector)
        for owner in list(self.retired):  # the row of an owner id from before a failover
            await conn.execute(self.q.registry_delete, {"owner": owner})
            self.retired.discard(owner)
        await conn.execute(self.q.registry_upsert, row)
        if self.leader is None or self.leader.still_leading():
            cur = await conn.execute(self.q.registry_purge_stale, {"stale": STALE_AFTER})
            self.live, self._live_at = (await cur.fetchone())["live"], time.monotonic()
        if time.monotonic() >= self._next_depth:
            if time.monotonic() >= self._live_at + LIVE_REFRESH:
                # A follower counts the live masters only for the depth pause, and seldom.
                cur = await conn.execute(self.q.registry_live, {"stale": STALE_AFTER})
                self.live, self._live_at = (await cur.fetchone())["live"], time.monotonic()
            live = self.live
            started = time.monotonic()
            cur = await conn.execute(self.q.metrics_queue_depth, {"stale": STALE_AFTER})
            self.on_depth(await cur.fetchall())
            self._next_depth = time.monotonic() + depth_pause(
                self.interval, time.monotonic() - started, live)
        return self.interval  # the refresh period

    async def finish(self, conn: psycopg.AsyncConnection | None) -> None:
        """Remove this master's row (on a new connection if its own broke)."""
        fresh = None
        try:
            fresh = await self.db.reconnect(conn)
            await fresh.execute(self.q.registry_delete, {"owner": self.row()["owner"]})
        except Exception as exc:  # noqa: BLE001 - the row goes stale and is purged anyway
            event(log, logging.WARNING, "registry.leave_failed", error=db.first_line(exc))
        finally:
            if fresh is not None and fresh is not conn:
                await fresh.close()
