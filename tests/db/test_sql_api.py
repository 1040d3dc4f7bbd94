"""The SQL producer API: <schema>.enqueue(...) and <schema>.enqueue_many(...) from plain SQL.

Producers in any language (and triggers) use these functions directly, so they enforce the
same rules as the Python client, with stable SQLSTATEs: JR001 bad argument, JR002 undeclared
queue, JR003 idempotency conflict, JR004 payload too large.
"""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.store import db
from jobrun.errors import Conflict, InvalidInput, UnknownQueue


@pytest.fixture
def conn(pg_dsn, schema):
    """An autocommit connection whose search_path does NOT include the schema: calls qualify it."""
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def q(schema: str, text: str) -> sql.Composed:
    """Compose SQL with the (validated, quoted) schema name in place of {s}."""
    return sql.SQL(text).format(s=sql.Identifier(schema))


def count(conn, schema: str) -> int:
    return conn.execute(q(schema, "SELECT count(*) AS n FROM {s}.jobs")).fetchone()["n"]


def test_enqueue_from_plain_sql(conn, schema):
    row = conn.execute(q(schema, """SELECT * FROM {s}.enqueue('email.send', '{{"to":"a@b.c"}}'::jsonb,
                                                              queue => 'default')""")).fetchone()
    assert row["created"] is True
    assert (row["task"], row["queue"], row["status"]) == ("email.send", "default", "queued")
    assert (row["priority"], row["attempts"], row["max_attempts"]) == (0, 0, 5)
    assert row["run_at"] == row["created_at"]
    stored = conn.execute(q(schema, "SELECT * FROM {s}.jobs WHERE id = %s"), [row["id"]]).fetchone()
    assert stored["payload"] == {"to": "a@b.c"}
    assert count(conn, schema) == 1


def test_enqueue_named_arguments(conn, schema):
    row = conn.execute(q(schema, """SELECT * FROM {s}.enqueue(
        'report.build', '[1, 2]', priority => -3, delay => interval '10 minutes', max_attempts => 2,
        idempotency_key => 'rep-1', traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')
    """)).fetchone()
    assert (row["priority"], row["max_attempts"], row["idempotency_key"]) == (-3, 2, "rep-1")
    assert row["run_at"] - row["created_at"] == timedelta(minutes=10)
    tp = conn.execute(q(schema, "SELECT traceparent FROM {s}.jobs WHERE id = %s"), [row["id"]]).fetchone()
    assert tp["traceparent"].startswith("00-0af7651916cd43dd")
    again = conn.execute(q(schema, "SELECT * FROM {s}.enqueue('report.build', '[1,2]',"
                                   " idempotency_key => 'rep-1')")).fetchone()
    assert (again["id"], again["created"], again["priority"]) == (row["id"], False, -3)
    assert count(conn, schema) == 1


def test_enqueue_with_defaults_only(conn, schema):
    row = conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t')")).fetchone()
    payload = conn.execute(q(schema, "SELECT payload FROM {s}.jobs WHERE id = %s"), [row["id"]]).fetchone()
    assert payload["payload"] is None  # JSON null
    assert row["queue"] == "default"


def test_enqueue_many_from_plain_sql(conn, schema):
    conn.execute(q(schema, "INSERT INTO {s}.queues (name) VALUES ('emails')"))
    rows = conn.execute(q(schema, """SELECT * FROM {s}.enqueue_many(
        ARRAY['a.task', 'b.task', 'c.task'],
        ARRAY['{{"n": 1}}', '{{"n": 2}}', '{{"n": 3}}']::jsonb[],
        queues => ARRAY['emails', NULL, 'default'],
        idempotency_keys => ARRAY[NULL, 'k2', NULL])""")).fetchall()
    assert [r["created"] for r in rows] == [True, True, True]
    ids = [r["id"] for r in rows]
    stored = {r["id"]: r for r in conn.execute(q(schema, "SELECT * FROM {s}.jobs")).fetchall()}
    assert [stored[i]["task"] for i in ids] == ["a.task", "b.task", "c.task"]
    assert [stored[i]["payload"]["n"] for i in ids] == [1, 2, 3]
    assert [stored[i]["queue"] for i in ids] == ["emails", "default", "default"]
    assert stored[ids[1]]["idempotency_key"] == "k2"

    replay = conn.execute(q(schema, """SELECT * FROM {s}.enqueue_many(
        ARRAY['x.task', 'b.task'], ARRAY['1', '{{"n": 2}}']::jsonb[],
        idempotency_keys => ARRAY[NULL, 'k2'])""")).fetchall()
    assert [r["created"] for r in replay] == [True, False]
    assert replay[1]["id"] == ids[1]
    assert count(conn, schema) == 4


def test_enqueue_many_of_nothing(conn, schema):
    assert conn.execute(q(schema, "SELECT * FROM {s}.enqueue_many(ARRAY[]::text[])")).fetchall() == []
    assert conn.execute(q(schema, "SELECT * FROM {s}.enqueue_many(NULL)")).fetchall() == []


# --- the same validation as the client ------------------------------------------------------

BAD_CALLS = [
    ("SELECT * FROM {s}.enqueue('bad task')", "JR001", 'invalid task name "bad task"', InvalidInput),
    ("SELECT * FROM {s}.enqueue('9t')", "JR001", 'invalid task name "9t"', InvalidInput),
    ("SELECT * FROM {s}.enqueue('t', priority => 101)", "JR001", "invalid priority 101",
     InvalidInput),
    ("SELECT * FROM {s}.enqueue('t', max_attempts => 0)", "JR001",
     "invalid max_attempts 0", InvalidInput),
    ("SELECT * FROM {s}.enqueue('t', idempotency_key => '')", "JR001",
     "invalid idempotency key", InvalidInput),
    ("SELECT * FROM {s}.enqueue('t', queue => 'nowhere')", "JR002", 'queue "nowhere" is not declared',
     UnknownQueue),
    ("SELECT * FROM {s}.enqueue('t', queue => 'bad queue')", "JR001", 'invalid queue name "bad queue"',
     InvalidInput),
    ("SELECT * FROM {s}.enqueue('t', run_at => now(), delay => interval '1 minute')", "JR001",
     "not both", InvalidInput),
    ("SELECT * FROM {s}.enqueue('t', '{{\"a\": 1}}', idempotency_key => 'taken')", "JR003",
     'idempotency key "taken"', Conflict),
    ("SELECT * FROM {s}.enqueue('other', '{{\"a\": 0}}', idempotency_key => 'taken')", "JR003",
     'idempotency key "taken"', Conflict),
    ("SELECT * FROM {s}.enqueue_many(ARRAY['a', 'b'], ARRAY['1']::jsonb[])", "JR001",
     "as many elements", InvalidInput),
    ("SELECT * FROM {s}.enqueue_many(ARRAY['a', 'b'], queues => ARRAY['default', 'nowhere'])", "JR002",
     "nowhere", UnknownQueue),
    ("SELECT * FROM {s}.enqueue_many(ARRAY['a', 'b b'])", "JR001", 'job 2: invalid task name "b b"',
     InvalidInput),
    ("SELECT * FROM {s}.enqueue_many(ARRAY['a', NULL])", "JR001", "job 2: invalid task name NULL",
     InvalidInput),
    ("SELECT * FROM {s}.enqueue_many(ARRAY['a', 'b'], idempotency_keys => ARRAY['dup', 'dup'],"
     " payloads => ARRAY['1', '2']::jsonb[])", "JR003", 'idempotency key "dup"', Conflict),
    ("SELECT * FROM {s}.enqueue('t', '\"\\u0000\"'::jsonb)", pg_errors.UntranslatableCharacter, "0000",
     InvalidInput),
]


@pytest.mark.parametrize("text,sqlstate,fragment,jobrun_error", BAD_CALLS,
                         ids=[str(i) for i in range(len(BAD_CALLS))])
def test_sql_api_rejects_bad_calls_and_changes_nothing(conn, schema, text, sqlstate, fragment,
                                                      jobrun_error):
    conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t', '{{\"a\": 0}}', idempotency_key => 'taken')"))
    with pytest.raises(psycopg.Error) as info:
        conn.execute(q(schema, text))
    exc = info.value
    if isinstance(sqlstate, str):
        assert exc.sqlstate == sqlstate
    else:
        assert isinstance(exc, sqlstate)
    assert fragment in str(exc) or fragment == (exc.diag.constraint_name or exc.diag.column_name)
    # The client's translation gives the matching jobrun error.
    assert isinstance(db.translate(exc, schema=schema), jobrun_error)
    assert count(conn, schema) == 1


def test_payload_cap_from_a_session_setting(conn, schema):
    conn.execute("SET jobrun.max_payload_bytes = 100")
    body = "x" * 98  # '"xxx…"' is exactly 100 bytes of JSON text
    row = conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), [body]).fetchone()
    assert row["created"]
    with pytest.raises(psycopg.Error) as info:
        conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), [body + "x"])
    assert info.value.sqlstate == "JR004"
    assert "over the limit of 100 bytes" in str(info.value)
    # Bytes, not characters: 49 two-byte characters plus quotes is 100 bytes, 50 is 102.
    conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), ["é" * 49])
    with pytest.raises(psycopg.Error) as info:
        conn.execute(q(schema, "SELECT * FROM {s}.enqueue_many(ARRAY['t', 't'], ARRAY[to_jsonb('ok'::text),"
                               " to_jsonb(%s::text)])"), ["é" * 50])
    assert info.value.sqlstate == "JR004"
    assert "payload 2 " in str(info.value)
    assert count(conn, schema) == 2
    conn.execute("RESET jobrun.max_payload_bytes")
    conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t', to_jsonb(%s::text))"), ["é" * 50])
    assert count(conn, schema) == 3


def test_sql_enqueue_wakes_the_queue(pg_dsn, conn, schema):
    channel = f"{schema}_ready"
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t', delay => interval '1 hour')"))
        conn.execute(q(schema, "SELECT * FROM {s}.enqueue('t')"))
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got += [(n.channel, n.payload) for n in listener.notifies(timeout=1, stop_after=1)]
        # The delayed job sent nothing; the runnable one woke "default".
        assert got == [(channel, "default")]


def test_trigger_enqueues_in_the_same_transaction(pg_dsn, conn, schema):
    conn.execute(q(schema, """
        CREATE TABLE {s}.signups (id serial PRIMARY KEY, email text NOT NULL);
        CREATE FUNCTION {s}.welcome() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM * FROM {s}.enqueue('email.welcome', jsonb_build_object('to', NEW.email),
                                       idempotency_key => 'welcome:' || NEW.id);
            RETURN NEW;
        END $$;
        CREATE TRIGGER signups_welcome AFTER INSERT ON {s}.signups
            FOR EACH ROW EXECUTE FUNCTION {s}.welcome();
    """))

    def signups(c) -> int:
        return c.execute(q(schema, "SELECT count(*) AS n FROM {s}.signups")).fetchone()["n"]

    with psycopg.connect(pg_dsn, row_factory=dict_row) as tx:
        tx.execute(q(schema, "INSERT INTO {s}.signups (email) VALUES ('a@b.c'), ('d@e.f')"))
        assert (signups(tx), count(tx, schema)) == (2, 2)   # both, inside the transaction
        assert (signups(conn), count(conn, schema)) == (0, 0)  # neither, outside it
        tx.rollback()
    assert (signups(conn), count(conn, schema)) == (0, 0)

    with psycopg.connect(pg_dsn, row_factory=dict_row) as tx:
        tx.execute(q(schema, "INSERT INTO {s}.signups (email) VALUES ('g@h.i')"))
        tx.commit()
    assert (signups(conn), count(conn, schema)) == (1, 1)
    job = conn.execute(q(schema, "SELECT * FROM {s}.jobs")).fetchone()
    assert (job["task"], job["payload"]) == ("email.welcome", {"to": "g@h.i"})
    assert job["idempotency_key"].startswith("welcome:")


def test_trigger_failure_rolls_back_the_users_insert(pg_dsn, conn, schema):
    """A trigger enqueueing into an undeclared queue fails the user's statement as a whole."""
    conn.execute(q(schema, """
        CREATE TABLE {s}.orders (id int);
        CREATE FUNCTION {s}.ship() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM * FROM {s}.enqueue('order.ship', to_jsonb(NEW.id), queue => 'shipping');
            RETURN NEW;
        END $$;
        CREATE TRIGGER orders_ship AFTER INSERT ON {s}.orders FOR EACH ROW EXECUTE FUNCTION {s}.ship();
    """))
    with pytest.raises(psycopg.Error) as info:
        conn.execute(q(schema, "INSERT INTO {s}.orders VALUES (1)"))
    assert info.value.sqlstate == "JR002"
    assert conn.execute(q(schema, "SELECT count(*) AS n FROM {s}.orders")).fetchone()["n"] == 0
    conn.execute(q(schema, "INSERT INTO {s}.queues (name) VALUES ('shipping')"))
    conn.execute(q(schema, "INSERT INTO {s}.orders VALUES (2)"))
    assert count(conn, schema) == 1
