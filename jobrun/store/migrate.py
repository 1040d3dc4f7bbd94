"""Schema migrations: numbered .sql files applied in order, each in its own transaction.

Safe to run from many processes at once: each step takes a transaction-level advisory lock
keyed on the schema, re-reads the applied versions under it, and records its version in
``<schema>.schema_migrations`` in the same transaction as its DDL.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from jobrun import validate
from jobrun.sql import migrations, render

_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended('jobrun.migrate:' || %s, 0))"


def _applied(conn: psycopg.Connection, schema: str) -> set[int]:
    cur = conn.cursor(row_factory=tuple_row)
    regclass = cur.execute("SELECT to_regclass(%s) IS NOT NULL",
                           [f'"{schema}".schema_migrations']).fetchone()
    if not regclass or not regclass[0]:
        return set()
    table = sql.Identifier(schema, "schema_migrations")
    return {row[0] for row in cur.execute(sql.SQL("SELECT version FROM {}").format(table))}


def status(conn: psycopg.Connection, schema: str) -> tuple[set[int], int]:
    """(applied versions, latest available version)."""
    validate.schema_name(schema)
    return _applied(conn, schema), len(migrations())


def migrate(conn: psycopg.Connection, schema: str, target: int | None = None) -> list[int]:
    """Apply missing migrations up to ``target`` (default: all); return the versions applied.

    ``conn`` must be in autocommit mode (each step is its own transaction).
    """
    validate.schema_name(schema)
    done: list[int] = []
    for mig in migrations():
        if target is not None and mig.version > target:
            break
        with conn.transaction():
            conn.execute(_LOCK_SQL, [schema])
            ident = sql.Identifier(schema)
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {}.schema_migrations ("
                    " version integer PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(ident)
            )
            if mig.version in _applied(conn, schema):
                continue
            conn.execute(render(mig.text, schema))
            conn.execute(
                sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES (%s, %s)").format(ident),
                [mig.version, mig.name],
            )
            done.append(mig.version)
    return done
