"""The server's connection pool, and operations (jobrun.ops generators) driven over it.

One :class:`~jobrun.client.AsyncClient` drives every operation on a connection borrowed from
the pool, so the API runs the very code the Python clients run.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from jobrun import config, ops
from jobrun.client import AsyncClient
from jobrun.store import db


# Seconds a request waits for a pooled connection before it is answered 503.
CONNECT_TIMEOUT = 5.0


class Database:
    def __init__(self, settings: config.Settings, *, min_size: int = 1, max_size: int = 8) -> None:
        self.client = AsyncClient(settings=settings)
        self.q = self.client.queries
        self.limit = self.client.limit
        self.pool = AsyncConnectionPool(
            db.follow_primary(self.client.dsn), min_size=min_size, max_size=max_size, open=False,
            kwargs={"autocommit": True, "row_factory": dict_row}, configure=self._configure,
            name="jobrun-web", timeout=CONNECT_TIMEOUT)

    async def _configure(self, conn: psycopg.AsyncConnection) -> None:
        await conn.execute(self.q.web_session_utc)
        await conn.execute(self.q.web_session_custom_plans)

    async def open(self) -> None:
        await self.pool.open(wait=False)

    async def close(self) -> None:
        await self.pool.close()

    async def run(self, op: ops.Op) -> Any:
        """Drive one operation on a pooled connection; errors come out as jobrun's."""
        try:
            async with self.pool.connection() as conn:
                return await self.client.run(op, conn)
        except psycopg.Error as exc:  # the pool's own (PoolTimeout is an OperationalError)
            raise db.translate(exc, self.client.dsn, self.q.schema) from None
