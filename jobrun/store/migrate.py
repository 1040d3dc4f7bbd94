"""Schema migrations: numbered .sql files applied in order, each in its own transaction.

Safe to run from many processes at once: each step takes a transaction-level advisory lock
keyed on the schema, re-reads the applied versions under it, and records its version in
``<schema>.schema_migrations`` in the same transaction as its DDL.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import tuple_row

from jobrun import validate
from jobrun.sql import for_schema, migrations, render


def _applied(conn: psycopg.Connection, schema: str) -> set[int]:
    q = for_schema(schema)
    cur = conn.cursor(row_factory=tuple_row)
    present = cur.execute(q.migrate_ledger_exists, {"schema": schema}).fetchone()
    if not present or not present[0]:
        return set()
    return {row[0] for row in cur.execute(q.migrate_applied)}


def status(conn: psycopg.Connection, schema: str) -> tuple[set[int], int]:
    """(applied versions, latest available version)."""
    validate.schema_name(schema)
    return _applied(conn, schema), len(migrations())


def migrate(conn: psycopg.Connection, schema: str, target: int | None = None) -> list[int]:
    """Apply missing migrations up to ``target`` (default: all); return the versions applied.

    ``conn`` must be in autocommit mode (each step is its own transaction).
    """
    validate.schema_name(schema)
    q = for_schema(schema)
    done: list[int] = []
    for mig in migrations():
        if target is not None and mig.version > target:
            break
        with conn.transaction():
            conn.execute(q.migrate_lock, {"schema": schema})
            conn.execute(q.migrate_create_schema)
            conn.execute(q.migrate_create_ledger)
            if mig.version in _applied(conn, schema):
                continue
            conn.execute(render(mig.text, schema))
            conn.execute(q.migrate_record, {"version": mig.version, "name": mig.name})
            done.append(mig.version)
    return done
