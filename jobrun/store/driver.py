"""The one driver of jobrun.ops generators: run each Step on a connection, send the answer
back (rows, or the row count of a step that returns none), and return the operation's value.

Each operation is written once, without I/O, as a generator (jobrun.ops); the sync client,
the async client and the master's reaper all run it through here. Database errors become
jobrun's errors (store.db.translate).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from jobrun.store import db


def drive(op: Any, conn: psycopg.Connection, *, dsn: str | None = None,
          schema: str | None = None) -> Any:
    """Run ``op`` to its end on a sync connection."""
    try:
        step = next(op)
        while True:
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(step.query, step.params)
                result = cur.fetchall() if step.returns_rows else cur.rowcount
            step = op.send(result)
    except StopIteration as stop:
        return stop.value
    except psycopg.Error as exc:
        raise db.translate(exc, dsn, schema) from None


async def drive_async(op: Any, conn: psycopg.AsyncConnection, *, dsn: str | None = None,
                      schema: str | None = None) -> Any:
    """Run ``op`` to its end on an async connection (the same protocol as ``drive``)."""
    try:
        step = next(op)
        while True:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(step.query, step.params)
                result = await cur.fetchall() if step.returns_rows else cur.rowcount
            step = op.send(result)
    except StopIteration as stop:
        return stop.value
    except psycopg.Error as exc:
        raise db.translate(exc, dsn, schema) from None
