"""The producer role that `jobrun roles` grants adds queued jobs and nothing else: its own
inserts cannot set a job's status, attempts, crashes, lease, version or timestamps (they take
their defaults), nor store a payload past the operator's cap; the client's fast path and the
SQL functions still work as that role. A lease ending later than any master takes one is
reaped."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row

import jobrun
from jobrun.admin import roles as admin_roles
from jobrun.config import MAX_LEASE_TTL
from jobrun.sql import for_schema
from jobrun.worker.reaper import reap_params
from tests.invariants import nothing_lost

MIB = 1024 * 1024


@pytest.fixture
def producer_dsn(pg_dsn, schema, admin_conn):
    """A login role in the producer group that `jobrun roles --apply` grants."""
    names = admin_roles.RoleNames.with_prefix(f"p{uuid.uuid4().hex[:8]}_")
    admin_roles.apply(admin_conn, schema, names)
    login = names.producer + "_login"
    admin_conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
        sql.Identifier(login), sql.Identifier(names.producer)))
    yield make_conninfo(pg_dsn, user=login)
    for name in (login, names.producer, names.worker, names.observer):
        admin_conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
        admin_conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


@pytest.fixture
def producer(producer_dsn):
    with psycopg.connect(producer_dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


def _q(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def _count(admin_conn, schema: str) -> int:
    return admin_conn.execute(_q(schema, "SELECT count(*) FROM {s}.jobs")).fetchone()[0]


@pytest.mark.parametrize("columns, values", [
    ("status, lease_owner, lease_token", "'leased', 'forged', 1"),
    ("status, lease_owner, lease_expires_at", "'leased', 'forged', now() + interval '100 years'"),
    ("status, finished_at", "'succeeded', now()"),
    ("attempts", "999"),
    ("crashes", "3"),
    ("version", "7"),
    ("cancel_requested", "true"),
    ("started_at", "now()"),
    ("created_at", "now() - interval '1 year'"),
    ("idempotency_key", "'k'"),
], ids=["leased", "lease-100-years", "succeeded", "attempts", "crashes", "version", "cancel",
        "started", "created", "idempotency-key"])
def test_producer_cannot_insert_what_a_new_job_does_not_choose(producer, admin_conn, schema,
                                                              columns, values):
    with pytest.raises(errors.InsufficientPrivilege):
        producer.execute(_q(schema, f"INSERT INTO {{s}}.jobs (queue, task, {columns})"
                                    f" VALUES ('default', 't', {values})"))
    with pytest.raises(errors.InsufficientPrivilege):
        with producer.cursor() as cur:
            with cur.copy(_q(schema, f"COPY {{s}}.jobs (queue, task, {columns}) FROM STDIN")) as copy:
                copy.write_row(("default", "t", "x"))
    assert _count(admin_conn, schema) == 0


def test_a_producers_own_row_is_queued_unleased_and_never_started(producer, admin_conn, schema):
    producer.execute(_q(schema, "INSERT INTO {s}.jobs (id, queue, task, payload, priority, run_at,"
                                " max_attempts, traceparent, concurrency_key) VALUES"
                                " (1000, 'default', 't', '{{\"a\": 1}}', 5, now(), 3, NULL, 'c')"))
    with producer.cursor() as cur:
        with cur.copy(_q(schema, "COPY {s}.jobs (queue, task, payload) FROM STDIN")) as copy:
            copy.write_row(("default", "t", '{"b": 2}'))
    admin_conn.row_factory = dict_row
    rows = admin_conn.execute(_q(schema, "SELECT status, attempts, crashes, lease_owner, lease_token,"
                                         " lease_expires_at, version, started_at, finished_at,"
                                         " cancel_requested FROM {s}.jobs")).fetchall()
    assert rows == [{"status": "queued", "attempts": 0, "crashes": 0, "lease_owner": None,
                     "lease_token": 0, "lease_expires_at": None, "version": 0,
                     "started_at": None, "finished_at": None, "cancel_requested": False}] * 2


def test_a_producers_own_insert_is_held_to_the_payload_cap(producer, admin_conn, schema):
    big = "x" * (2 * MIB)
    for statement in (
        "INSERT INTO {s}.jobs (queue, task, payload) VALUES ('default', 't', to_jsonb(%s::text))",
        "INSERT INTO {s}.jobs (queue, task, payload) SELECT 'default', 't', p"
        " FROM unnest(ARRAY['1'::jsonb, to_jsonb(%s::text)]) AS p",
    ):
        with pytest.raises(psycopg.Error) as info:
            producer.execute(_q(schema, statement), [big])
        assert info.value.sqlstate == "JR004"
        assert "over the limit of 1048576 bytes" in info.value.diag.message_primary
    with pytest.raises(psycopg.Error) as info:
        with producer.cursor() as cur:
            with cur.copy(_q(schema, "COPY {s}.jobs (queue, task, payload) FROM STDIN")) as copy:
                copy.write_row(("default", "t", '"' + big + '"'))
    assert info.value.sqlstate == "JR004"
    # The shapes the functions refuse are refused too.
    deep = "[" * 101 + "]" * 101
    with pytest.raises(psycopg.Error) as info:
        producer.execute(_q(schema, "INSERT INTO {s}.jobs (queue, task, payload)"
                                    " VALUES ('default', 't', %s::jsonb)"), [deep])
    assert info.value.sqlstate == "JR001" and "nested deeper than 100" in info.value.diag.message_primary
    assert _count(admin_conn, schema) == 0
    # The operator's cap is the one that binds, as for the functions.
    admin_conn.execute(_q(schema, "UPDATE {s}.settings SET value = 4194304 WHERE name = 'max_payload_bytes'"))
    producer.execute(_q(schema, "INSERT INTO {s}.jobs (queue, task, payload)"
                                " VALUES ('default', 't', to_jsonb(%s::text))"), [big])
    assert _count(admin_conn, schema) == 1


def test_client_and_sql_api_work_as_the_producer(producer_dsn, producer, schema):
    with jobrun.Client(producer_dsn, schema=schema) as client:
        job, created = client.enqueue("noop", {"n": 1}, priority=3, max_attempts=2,
                                      concurrency_key="c", delay=60)
        assert created and client.get(job.id).status == "queued"
        assert client.enqueue("noop", {"n": 2}, idempotency_key="k")[1] is True
        assert client.enqueue("noop", {"n": 2}, idempotency_key="k")[1] is False
        many = client.enqueue_many([("noop", {"n": i}) for i in range(50)], priority=1)
        assert len(many) == 50 and all(created for _, created in many)
        keyed = client.enqueue_many([jobrun.JobSpec("noop", {"n": 1}, idempotency_key="m")])
        assert keyed[0][1] is True
        with pytest.raises(jobrun.InvalidInput):
            client.enqueue("noop", "x" * (2 * MIB))
    row = producer.execute(_q(schema, "SELECT * FROM {s}.enqueue('email.send', '{{\"to\": 1}}')")).fetchone()
    assert row["created"] and row["status"] == "queued"
    assert len(producer.execute(_q(schema, "SELECT * FROM {s}.enqueue_many(ARRAY['a', 'b'])")).fetchall()) == 2


def test_async_client_works_as_the_producer(producer_dsn, schema):
    async def main():
        async with jobrun.AsyncClient(producer_dsn, schema=schema) as client:
            return (await client.enqueue("noop", {"n": 1}),
                    await client.enqueue_many([("noop", {"n": i}) for i in range(5)]))
    (_, created), many = asyncio.run(main())
    assert created and len(many) == 5


def test_a_lease_past_the_longest_a_master_takes_is_reaped(admin_conn, schema):
    q = for_schema(schema)
    admin_conn.row_factory = dict_row
    insert = _q(schema, "INSERT INTO {s}.jobs (queue, task, status, attempts, lease_owner, lease_token,"
                        " lease_expires_at) VALUES ('default', 't', 'leased', 1, 'forged', 1,"
                        " now() + make_interval(secs => %s)) RETURNING id")
    forged = admin_conn.execute(insert, [100 * 365 * 86400.0]).fetchone()["id"]
    held = admin_conn.execute(insert, [MAX_LEASE_TTL - 60]).fetchone()["id"]
    assert [p for p, i in nothing_lost(admin_conn, schema) if i == forged] == ["lease past the bound"]
    reaped = admin_conn.execute(q.reap_expired, reap_params(10, {})).fetchall()
    assert [r["job_id"] for r in reaped] == [forged]
    row = admin_conn.execute(_q(schema, "SELECT status, lease_owner FROM {s}.jobs WHERE id = %s"),
                             [forged]).fetchone()
    assert row == {"status": "queued", "lease_owner": None}
    error = admin_conn.execute(_q(schema, "SELECT error FROM {s}.job_attempts WHERE job_id = %s"),
                               [forged]).fetchone()["error"]
    assert "lease ends later than any master takes one (forged)" in error
    assert admin_conn.execute(_q(schema, "SELECT status FROM {s}.jobs WHERE id = %s"),
                              [held]).fetchone()["status"] == "leased"


def test_roles_apply_takes_back_a_table_wide_insert(producer, admin_conn, schema):
    """A producer granted by an older `jobrun roles` held INSERT on every column; applying the
    roles again leaves it the columns a new job chooses."""
    group = producer.execute("SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid"
                             " WHERE m.member = current_user::regrole").fetchone()["rolname"]
    names = admin_roles.RoleNames.with_prefix(group.removesuffix("producer"))
    admin_conn.execute(_q(schema, "GRANT INSERT ON {s}.jobs TO ") + sql.Identifier(group))
    forged = _q(schema, "INSERT INTO {s}.jobs (queue, task, attempts) VALUES ('default', 't', 999)")
    producer.execute(forged)
    admin_roles.apply(admin_conn, schema, names)
    with pytest.raises(errors.InsufficientPrivilege):
        producer.execute(forged)
    producer.execute(_q(schema, "INSERT INTO {s}.jobs (queue, task) VALUES ('default', 't')"))
