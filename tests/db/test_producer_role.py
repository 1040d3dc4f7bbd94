"""A producer role with only USAGE on the schema and EXECUTE on the enqueue functions: it can
enqueue (jobs and workflows) through the SQL API, and can neither write rows directly, nor raise the payload cap,
nor change the limits. A leased row with no expiry (which no claim writes) is recovered."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.worker.reaper import reap_params


@pytest.fixture
def producer(pg_dsn, schema, admin_conn):
    """A connection acting as a fresh role granted what docs/concepts.md says producers need."""
    role = "producer_" + uuid.uuid4().hex[:8]
    s, r = sql.Identifier(schema), sql.Identifier(role)
    admin_conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(r))
    admin_conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, r))
    admin_conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {}.enqueue, {}.enqueue_many,"
                               " {}.enqueue_workflow TO {}").format(s, s, s, r))
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(sql.SQL("SET ROLE {}").format(r))
        yield conn
    admin_conn.execute(sql.SQL("DROP OWNED BY {}").format(r))
    admin_conn.execute(sql.SQL("DROP ROLE {}").format(r))


def _q(schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def test_producer_enqueues_with_execute_only(producer, schema):
    row = producer.execute(_q(schema, "SELECT * FROM {s}.enqueue('email.send', '{{\"to\": 1}}')")).fetchone()
    assert row["created"] and row["status"] == "queued"
    rows = producer.execute(_q(schema, "SELECT * FROM {s}.enqueue_many(ARRAY['a', 'b'])")).fetchall()
    assert len(rows) == 2
    # A workflow, after a stored job: its parent is marked as one under the function's rights.
    [flow] = producer.execute(_q(schema, "SELECT * FROM {s}.enqueue_workflow(ARRAY['c', 'd'],"
                                         " edge_dependents => ARRAY[2, 2],"
                                         " parent_items => ARRAY[1, NULL],"
                                         " parent_jobs => ARRAY[NULL, %s::bigint])"),
                              [row["id"]]).fetchall()
    assert flow["created"] and len(flow["ids"]) == 2


@pytest.mark.parametrize("statement", [
    "INSERT INTO {s}.jobs (queue, task, status, lease_owner, lease_token) VALUES ('default', 't', 'leased', 'x', 1)",
    "INSERT INTO {s}.jobs (queue, task, attempts) VALUES ('default', 't', 999)",
    "UPDATE {s}.jobs SET attempts = 999",
    "UPDATE {s}.settings SET value = 100000000",
])
def test_producer_cannot_write_rows_directly(producer, schema, statement):
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        producer.execute(_q(schema, statement))


def test_producer_cannot_raise_the_payload_cap(producer, admin_conn, schema):
    producer.execute("SET jobrun.max_payload_bytes = 100000000")
    body = "x" * (2 * 1024 * 1024)
    with pytest.raises(psycopg.Error) as info:
        producer.execute(_q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), [body])
    assert info.value.sqlstate == "JR004"
    assert "over the limit of 1048576 bytes" in info.value.diag.message_primary
    # Lowering it for its own session is allowed.
    producer.execute("SET jobrun.max_payload_bytes = 10")
    with pytest.raises(psycopg.Error) as info:
        producer.execute(_q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), ["x" * 20])
    assert info.value.sqlstate == "JR004"
    # An operator raises it in the settings table.
    admin_conn.execute(_q(schema, "UPDATE {s}.settings SET value = 4194304 WHERE name = 'max_payload_bytes'"))
    producer.execute("RESET jobrun.max_payload_bytes")
    assert producer.execute(_q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), [body]).fetchone()["created"]


def test_leased_row_with_no_expiry_is_recovered(admin_conn, schema):
    q = for_schema(schema)
    admin_conn.row_factory = dict_row
    job_id = admin_conn.execute(_q(schema, "INSERT INTO {s}.jobs (queue, task, status, attempts,"
                                           " lease_owner, lease_token) VALUES ('default', 't',"
                                           " 'leased', 1, 'forged', 1) RETURNING id")).fetchone()["id"]
    reaped = admin_conn.execute(q.reap_expired, reap_params(10, {})).fetchall()
    assert [r["job_id"] for r in reaped] == [job_id]
    row = admin_conn.execute(_q(schema, "SELECT status, lease_owner FROM {s}.jobs WHERE id = %s"), [job_id]).fetchone()
    assert row == {"status": "queued", "lease_owner": None}
