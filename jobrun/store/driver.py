"""The one driver of jobrun.ops generators: run each Step on a connection, send the answer
back (rows, or the row count of a step that returns none), and return the operation's value.

Each operation is written once, without I/O, as a generator (jobrun.ops); the sync client,
the async client and the master's reaper all run it through here. Database errors become
jobrun's errors (store.db.translate).
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Any

import psycopg
from psycopg.rows import dict_row

from jobrun.sql import numbered
from jobrun.store import db
from jobrun.store.direct import Statement


def drive(op: Any, conn: psycopg.Connection, *, dsn: str | None = None,
          schema: str | None = None, direct: bool = False) -> Any:
    """Run ``op`` to its end on a sync connection. ``direct``: ``conn`` is in autocommit mode
    and the caller's alone, so its statements may go out prepared on libpq directly
    (jobrun.store.direct), without psycopg's cursor, a step's ``then`` in the same round trip."""
    try:
        step = next(op)
        while True:
            found, after = _direct_steps(step, direct)
            try:
                if found is not None:
                    rows, count = found[0].run(conn, found[1], after)
                    result = rows if step.returns_rows else count
                else:
                    result = _execute(conn, step)
            finally:
                if step.then is not None and after is None:
                    try:
                        _execute(conn, step.then)
                    except psycopg.Error:
                        pass  # its outcome is ignored (ops.Step.then)
            step = op.send(result)
    except StopIteration as stop:
        return stop.value
    except psycopg.Error as exc:
        raise db.translate(exc, dsn, schema) from None


def _execute(conn: psycopg.Connection, step: Any) -> Any:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(step.query, step.params)
        return cur.fetchall() if step.returns_rows else cur.rowcount


async def drive_async(op: Any, conn: psycopg.AsyncConnection, *, dsn: str | None = None,
                      schema: str | None = None, direct: bool = False) -> Any:
    """Run ``op`` to its end on an async connection (the same protocol as ``drive``)."""
    try:
        step = next(op)
        while True:
            found, after = _direct_steps(step, direct)
            try:
                if found is not None:
                    rows, count = await found[0].run_async(conn, found[1], after)
                    result = rows if step.returns_rows else count
                else:
                    result = await _execute_async(conn, step)
            finally:
                if step.then is not None and after is None:
                    try:
                        await _execute_async(conn, step.then)
                    except psycopg.Error:
                        pass  # its outcome is ignored (ops.Step.then)
            step = op.send(result)
    except StopIteration as stop:
        return stop.value
    except psycopg.Error as exc:
        raise db.translate(exc, dsn, schema) from None


async def _execute_async(conn: psycopg.AsyncConnection, step: Any) -> Any:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(step.query, step.params)
        return await cur.fetchall() if step.returns_rows else cur.rowcount


_DML = re.compile(r"\s*(?:--[^\n]*\n\s*)*(?:SELECT|WITH|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_ids = itertools.count(1)


# A Statement per query text (each prepares itself once per connection). Texts come from the
# named queries of the schemas in use (jobrun.sql.for_schema): a few hundred for each.
@functools.lru_cache(maxsize=4096)
def _direct(query: str) -> tuple[Statement, tuple[str, ...]] | None:
    """The direct statement for a query, and its parameters' names in order; None for one
    that is not a single query or change (only those can be prepared) or that cannot be
    numbered (jobrun.sql.numbered)."""
    if not isinstance(query, str) or not _DML.match(query):
        return None
    found = numbered(query)
    if found is None:
        return None
    text, names = found
    return Statement(f"op{next(_ids)}", text), names


def _direct_steps(step: Any, direct: bool) -> tuple[Any, Any]:
    """The direct statements of ``step`` and of its ``then`` (each with its values), None
    where it goes through psycopg's cursor; ``then`` goes direct only with its step."""
    found = _direct_step(step) if direct else None
    after = _direct_step(step.then) if found is not None and step.then is not None else None
    return found, after


def _direct_step(step: Any) -> tuple[Statement, list[Any]] | None:
    """The direct statement of ``step`` and its parameter values in order, or None where the
    step goes through psycopg's cursor (its query cannot go direct, or a parameter it names
    is missing: psycopg then reports it)."""
    found = _direct(step.query)
    if found is None:
        return None
    statement, names = found
    try:
        return statement, [step.params[name] for name in names]
    except KeyError:
        return None
