"""Schema migrations: step by step equals fresh, idempotent, safe under concurrency, PG 15.

The schema comparison is a normalised dump of the catalog (tables, columns, constraints,
indexes, functions, triggers, types, sequences, views, comments, table options) with the
schema name replaced by a placeholder. It walks whatever the migrations created, so it keeps
its meaning as migration files are added.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import jobrun
from jobrun.store import migrate
from jobrun.errors import InvalidInput, UnknownQueue
from jobrun.records import JobSpec
from jobrun.sql import migrations
from jobrun.testing import Cluster

LATEST = len(migrations())
PG15_BIN = Path("/usr/lib/postgresql/15/bin")

CATALOG_QUERIES = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, coalesce(c.reloptions, '{}') AS reloptions
          FROM pg_class c WHERE c.relnamespace = %(ns)s AND c.relkind <> 'i'
         ORDER BY c.relname""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
               a.attnotnull, a.atthasdef, pg_get_expr(d.adbin, d.adrelid) AS default_expr,
               a.attidentity, a.attgenerated, a.attcollation::regcollation::text AS collation
          FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = %(ns)s AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY c.relname, a.attnum""",
    "constraints": """
        SELECT coalesce(c.relname, t.typname) AS owner, k.conname, k.contype,
               pg_get_constraintdef(k.oid) AS definition, k.condeferrable, k.condeferred
          FROM pg_constraint k
          LEFT JOIN pg_class c ON c.oid = k.conrelid
          LEFT JOIN pg_type t ON t.oid = k.contypid
         WHERE k.connamespace = %(ns)s
           AND k.contype <> 'n'  -- NOT NULL: in pg_constraint only from PG 18; see columns
         ORDER BY 1, 2""",
    "indexes": """
        SELECT tablename, indexname, indexdef FROM pg_indexes
         WHERE schemaname = %(name)s ORDER BY tablename, indexname""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid) AS args, p.prokind,
               pg_get_functiondef(p.oid) AS definition
          FROM pg_proc p WHERE p.pronamespace = %(ns)s AND p.prokind IN ('f', 'p')
         ORDER BY p.proname, 2""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) AS definition, t.tgenabled
          FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
         WHERE c.relnamespace = %(ns)s AND NOT t.tgisinternal
         ORDER BY c.relname, t.tgname""",
    "types": """
        SELECT t.typname, t.typtype,
               (SELECT array_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum)
                  FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0
                   AND NOT a.attisdropped) AS attributes,
               (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e
                 WHERE e.enumtypid = t.oid) AS labels,
               format_type(t.typbasetype, t.typtypmod) AS base
          FROM pg_type t
          LEFT JOIN pg_class r ON r.oid = t.typrelid
         WHERE t.typnamespace = %(ns)s AND t.typtype IN ('c', 'e', 'd', 'r')
           AND (r.oid IS NULL OR r.relkind = 'c')
         ORDER BY t.typname""",
    "sequences": """
        SELECT c.relname, s.seqtypid::regtype::text AS type, s.seqstart, s.seqincrement, s.seqmax,
               s.seqmin, s.seqcache, s.seqcycle
          FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
         WHERE c.relnamespace = %(ns)s ORDER BY c.relname""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid) AS definition FROM pg_class c
         WHERE c.relnamespace = %(ns)s AND c.relkind IN ('v', 'm') ORDER BY c.relname""",
    "comments": """
        SELECT d.classoid::regclass::text AS catalog,
               coalesce(c.relname, p.proname, t.typname, '?') AS object, d.objsubid, d.description
          FROM pg_description d
          LEFT JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
          LEFT JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
          LEFT JOIN pg_type t ON d.classoid = 'pg_type'::regclass AND t.oid = d.objoid
         WHERE coalesce(c.relnamespace, p.pronamespace, t.typnamespace) = %(ns)s
         ORDER BY 1, 2, 3""",
    "migrations": "SELECT version, name FROM {s}.schema_migrations ORDER BY version",
}


def catalog_dump(conn: psycopg.Connection, schema: str) -> dict[str, list]:
    """Everything the migrations created in ``schema``, as comparable data."""
    ns = conn.execute("SELECT oid FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
    assert ns is not None, f"schema {schema} does not exist"
    placeholder = re.compile(rf"\b{re.escape(schema)}\b")

    def norm(value):
        if isinstance(value, str):
            return placeholder.sub("<schema>", value)
        if isinstance(value, (list, tuple)):
            return [norm(v) for v in value]
        return value

    dump = {}
    for kind, query in CATALOG_QUERIES.items():
        text = sql.SQL(query)
        if "{s}" in query:
            text = text.format(s=sql.Identifier(schema))
        rows = conn.execute(text, {"ns": ns[0], "name": schema}).fetchall()
        dump[kind] = [norm(list(row)) for row in rows]
    return dump


def new_schema_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def test_migrations_are_numbered_and_described():
    found = migrations()
    assert [m.version for m in found] == list(range(1, LATEST + 1))
    assert LATEST >= 1
    for m in found:
        assert "{schema}" in m.text
        assert m.text.lstrip().startswith(f"-- {m.version:04d}"), f"migration {m.version} has no header"


def test_step_by_step_equals_fresh(admin_conn, schema, scratch_schemas):
    stepped = scratch_schemas("step")
    applied = []
    for k in range(1, LATEST + 1):
        done = migrate.migrate(admin_conn, stepped, target=k)
        assert done == [k]
        assert migrate.status(admin_conn, stepped) == (set(range(1, k + 1)), LATEST)
        applied += done
    assert applied == list(range(1, LATEST + 1))

    fresh = catalog_dump(admin_conn, schema)  # the fixture migrated it in one call
    step = catalog_dump(admin_conn, stepped)
    for kind in CATALOG_QUERIES:
        assert step[kind] == fresh[kind], f"{kind} differ between step-by-step and fresh"
    # The dump sees real content (an empty dump would compare equal to anything).
    assert {"jobs", "queues", "job_attempts", "schema_migrations"} <= {r[0] for r in fresh["relations"]}
    assert any(r[0] == "enqueue_many" for r in fresh["functions"])
    assert fresh["triggers"] and fresh["indexes"] and fresh["constraints"] and fresh["types"]
    assert all(schema not in json.dumps(rows, default=str) for rows in fresh.values())


def test_catalog_dump_notices_differences(admin_conn, schema, scratch_schemas):
    """The comparison above can fail: a small change to one schema shows up in the dump."""
    other = scratch_schemas("diff")
    migrate.migrate(admin_conn, other)
    assert catalog_dump(admin_conn, other) == catalog_dump(admin_conn, schema)
    changes = [
        ("ALTER TABLE {s}.jobs SET (fillfactor = 90)", "relations"),
        ("ALTER TABLE {s}.jobs ALTER COLUMN max_attempts SET DEFAULT 6", "columns"),
        ("CREATE OR REPLACE FUNCTION {s}.notify_ready() RETURNS trigger LANGUAGE plpgsql"
         " AS $$ BEGIN RETURN NULL; END $$", "functions"),
        ("DROP INDEX {s}.jobs_leased", "indexes"),
        ("ALTER DOMAIN {s}.job_priority DROP CONSTRAINT priority_range", "constraints"),
        ("ALTER TYPE {s}.enqueued ADD ATTRIBUTE extra int", "types"),
    ]
    for statement, kind in changes:
        before = catalog_dump(admin_conn, other)
        admin_conn.execute(sql.SQL(statement).format(s=sql.Identifier(other)))
        after = catalog_dump(admin_conn, other)
        assert after[kind] != before[kind], statement


def test_migrate_twice_is_a_no_op(admin_conn, schema):
    before = catalog_dump(admin_conn, schema)
    recorded = admin_conn.execute(sql.SQL("SELECT version, applied_at FROM {}.schema_migrations ORDER BY 1")
                                  .format(sql.Identifier(schema))).fetchall()
    assert migrate.migrate(admin_conn, schema) == []
    assert migrate.migrate(admin_conn, schema, target=1) == []
    assert catalog_dump(admin_conn, schema) == before
    again = admin_conn.execute(sql.SQL("SELECT version, applied_at FROM {}.schema_migrations ORDER BY 1")
                               .format(sql.Identifier(schema))).fetchall()
    assert again == recorded
    assert [v for v, _ in recorded] == list(range(1, LATEST + 1))


def test_target_zero_creates_no_objects(admin_conn, scratch_schemas):
    name = scratch_schemas("zero")
    assert migrate.migrate(admin_conn, name, target=0) == []
    assert migrate.status(admin_conn, name) == (set(), LATEST)


def test_migrate_rejects_bad_schema_names(admin_conn):
    for bad in ["Public", "a-b", 'x"; DROP SCHEMA public; --', "1abc", ""]:
        with pytest.raises(InvalidInput):
            migrate.migrate(admin_conn, bad)


def test_a_failed_step_leaves_nothing_behind(admin_conn, scratch_schemas):
    """Each step is one transaction: a migration that fails records nothing and creates nothing."""
    name = scratch_schemas("fail")
    admin_conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    admin_conn.execute(sql.SQL("CREATE TABLE {}.jobs (x int)").format(sql.Identifier(name)))  # in the way
    with pytest.raises(psycopg.errors.DuplicateTable):
        migrate.migrate(admin_conn, name)
    assert migrate.status(admin_conn, name)[0] == set()
    rels = {r[0] for r in admin_conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace", [name])}
    assert rels == {"jobs"}


CHILD = r"""
import json, sys
import psycopg
from jobrun.store import migrate
dsn, schema = sys.argv[1], sys.argv[2]
with psycopg.connect(dsn, autocommit=True) as conn:
    conn.execute("SELECT 1")
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    print(json.dumps(migrate.migrate(conn, schema)), flush=True)
"""


def test_concurrent_migrations_of_a_new_schema(pg_dsn, admin_conn, scratch_schemas):
    name = scratch_schemas("race")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, pg_dsn, name], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    try:
        # A barrier across processes: each is connected and waiting before any may start.
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    applied = sorted(v for out in outputs for v in out)
    assert applied == list(range(1, LATEST + 1))  # every version applied by exactly one process
    rows = admin_conn.execute(sql.SQL("SELECT version, count(*) FROM {}.schema_migrations GROUP BY 1"
                                      " ORDER BY 1").format(sql.Identifier(name))).fetchall()
    assert rows == [(v, 1) for v in range(1, LATEST + 1)]
    with jobrun.Client(pg_dsn, schema=name) as c:
        assert c.enqueue("t").created


@pytest.mark.skipif(not PG15_BIN.is_dir(), reason=f"PostgreSQL 15 binaries not installed at {PG15_BIN}")
def test_works_on_postgresql_15(pg_dsn, admin_conn, schema):
    name = new_schema_name("pg15")  # unique, so the placeholder cannot hit other words
    with Cluster(bin_dir=PG15_BIN) as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()[0]
            assert 150000 <= int(version) < 160000
            assert migrate.migrate(conn, name) == list(range(1, LATEST + 1))
            assert migrate.migrate(conn, name) == []
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"{name}_ready")))

            with jobrun.Client(cluster.dsn, schema=name) as client:
                job, created = client.enqueue("email.send", {"to": "a@b.c"}, idempotency_key="k")
                assert created and client.get(job.id).payload == {"to": "a@b.c"}
                assert client.enqueue("email.send", {"to": "a@b.c"}, idempotency_key="k").created is False
                with pytest.raises(UnknownQueue):
                    client.enqueue("t", queue="nowhere")
                client.declare_queue("bulk")
                result = client.enqueue_many([JobSpec("bulk.task", {"i": i}, queue="bulk")
                                              for i in range(1000)])
                assert len(result) == 1000 and all(c for _, c in result)
                ids = [i for i, _ in result]
                rows = dict(conn.execute(sql.SQL("SELECT id, (payload->>'i')::int FROM {}.jobs WHERE id = ANY(%s)")
                                         .format(sql.Identifier(name)), [ids]).fetchall())
                assert [rows[i] for i in ids] == list(range(1000))
                stats = {s.queue: s for s in client.stats()}
                assert (stats["bulk"].queued, stats["default"].queued) == (1000, 1)

            heard = sorted({n.payload for n in conn.notifies(timeout=10, stop_after=2)})
            assert heard == ["bulk", "default"]

            # The same schema as on the main server.
            on15 = catalog_dump(conn, name)
        main = catalog_dump(admin_conn, schema)
        for kind in CATALOG_QUERIES:
            assert on15[kind] == main[kind], f"{kind} differ between PostgreSQL 15 and the main server"
