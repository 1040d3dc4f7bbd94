"""``jobrun roles``: the SQL that creates and grants the producer, worker and observer roles.

The statements live in ``jobrun/sql/roles.sql``; this module only inserts the role names
(validated, then quoted by psycopg) and runs or prints them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import sql

from jobrun.errors import InvalidInput
from jobrun.sql import for_schema

BLOCKS = ("roles_create", "roles_revoke_public", "roles_grant_producer", "roles_grant_worker",
          "roles_grant_observer")
_PREFIX = re.compile(r"[a-z_][a-z0-9_]{0,40}")


@dataclass(frozen=True)
class RoleNames:
    producer: str
    worker: str
    observer: str

    @classmethod
    def with_prefix(cls, prefix: str) -> "RoleNames":
        if not _PREFIX.fullmatch(prefix):
            raise InvalidInput(f"invalid role prefix {prefix!r}: lower-case letters, digits and _,"
                               " not starting with a digit, at most 41 characters")
        return cls(prefix + "producer", prefix + "worker", prefix + "observer")


def statements(schema: str, names: RoleNames) -> list[sql.Composed]:
    q = for_schema(schema)
    values = {"schema_name": sql.Literal(schema)}
    for role in ("producer", "worker", "observer"):
        name = getattr(names, role)
        values[role] = sql.Identifier(name)
        values[role + "_name"] = sql.Literal(name)
    return [sql.SQL(getattr(q, block)).format(**values) for block in BLOCKS]


def script(schema: str, names: RoleNames, conn: psycopg.Connection | None = None) -> str:
    return "\n\n".join(s.as_string(conn) for s in statements(schema, names)) + "\n"


def apply(conn: psycopg.Connection, schema: str, names: RoleNames) -> None:
    """Run every block in one transaction (needs CREATEROLE and ownership of the schema)."""
    with conn.transaction():
        for statement in statements(schema, names):
            conn.execute(statement)
