"""How an enqueue wakes the masters, against a real PostgreSQL (migration 0011).

On the client's own connection (autocommit) an insert sends no NOTIFY at its commit (a
NOTIFY's commit holds a cluster-wide lock until it is flushed, so enqueues from many producers
would commit one at a time); the client sends the wake-up in a statement of its own right
after. Everywhere else (an enqueue in the caller's transaction, the SQL API) the insert
notifies at its commit as before. Notifications reach a listener in commit order, so a marker
sent after a call shows what the call itself sent before it.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import tuple_row

import jobrun
from jobrun import ops
from jobrun.errors import JobrunError, UnknownQueue
from jobrun.sql import for_schema
from jobrun.store.driver import drive, drive_async


def listen(pg_dsn: str, schema: str) -> psycopg.Connection:
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"{schema}_ready")))
    return conn


def until_marker(listener: psycopg.Connection, pg_dsn: str, schema: str) -> list[str]:
    """The payloads the listener receives up to a marker sent now from another session."""
    with psycopg.connect(pg_dsn, autocommit=True) as other:
        other.execute("SELECT pg_notify(%s, 'marker')", [f"{schema}_ready"])
    got: list[str] = []
    for note in listener.notifies(timeout=10):
        if note.payload == "marker":
            return got
        got.append(note.payload)
    raise AssertionError(f"no marker within 10 s (received {got})")


def executions(conn: psycopg.Connection, needle: str) -> int:
    """How many times the statements prepared on ``conn`` whose text holds ``needle`` ran."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT coalesce(sum(generic_plans + custom_plans), 0) FROM"
                    " pg_prepared_statements WHERE statement LIKE %s", [f"%{needle}%"],
                    prepare=False)
        return int(cur.fetchone()[0])


def test_the_plain_insert_notifies_at_its_commit_unless_told_after(pg_dsn, schema):
    q = for_schema(schema)
    base = {"task": "t", "payload": "{}", "priority": None, "run_at": None, "delay": None,
            "max_attempts": None, "traceparent": None, "concurrency_key": None,
            "queue": "default"}
    with listen(pg_dsn, schema) as listener, psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(q.insert_job, {**base, "notify": "commit"})
        at_commit = until_marker(listener, pg_dsn, schema)
        conn.execute(q.insert_job, {**base, "notify": "after"})
        told_after = until_marker(listener, pg_dsn, schema)
        conn.execute(q.insert_jobs, {"n": 1, "queue_names": ["default"], "tasks": ["t"],
                                     "payloads": ["{}"], "queue": "default", "queues": None,
                                     "priority": None, "priorities": None, "run_at": None,
                                     "run_ats": None, "max_attempts": None,
                                     "attempt_limits": None, "traceparent": None,
                                     "concurrency_keys": None, "notify": "after"})
        many_after = until_marker(listener, pg_dsn, schema)
        # The setting lasts for its transaction only: a plain INSERT after it notifies again.
        conn.execute(sql.SQL("INSERT INTO {}.jobs (queue, task) VALUES ('default', 't')")
                     .format(sql.Identifier(schema)))
        plain = until_marker(listener, pg_dsn, schema)
    assert (at_commit, told_after, many_after, plain) == (["default"], [], [], ["default"])


def test_an_enqueue_on_the_clients_own_connection_wakes_once_after_its_commit(pg_dsn, schema, client):
    client.declare_queue("emails")
    with listen(pg_dsn, schema) as listener:
        job = client.enqueue("t", {"n": 1}, queue="emails").job
        one = until_marker(listener, pg_dsn, schema)
        # Woken, the job is there to claim: the wake-up went out after the commit.
        status = listener.execute(sql.SQL("SELECT status FROM {}.jobs WHERE id = %s")
                                  .format(sql.Identifier(schema)), [job.id]).fetchone()[0]
        client.enqueue_many([("t", {"n": 2}), jobrun.JobSpec("t", {"n": 3}, queue="default"),
                             ("t", {"n": 4})], queue="emails")
        many = until_marker(listener, pg_dsn, schema)
        client.enqueue("t", {"n": 5}, delay=3600)
        client.enqueue_many([("t", {"n": 6})], delay=3600)
        for enqueue in (lambda: client.enqueue("t", queue="nowhere"),
                        lambda: client.enqueue_many([("t", None)], queue="nowhere")):
            with pytest.raises(UnknownQueue):
                enqueue()
        delayed = until_marker(listener, pg_dsn, schema)  # nor an undeclared queue
    # The single enqueues' inserts are prepared with jobrun.notify 'after', the wake-up sent
    # with the first and the undeclared one in the same round trip (the delayed one has none);
    # enqueue_many's insert goes through psycopg's cursor, its wake-up after it there.
    quiet_inserts = executions(client._conn, "set_config('jobrun.notify'")
    wakes = executions(client._conn, "pg_notify")
    assert (one, status, sorted(many), delayed) == (["emails"], "queued", ["default", "emails"], [])
    assert (quiet_inserts, wakes) == (3, 2)


def test_an_enqueue_in_the_callers_transaction_notifies_at_its_commit(pg_dsn, schema, client):
    with listen(pg_dsn, schema) as listener, psycopg.connect(pg_dsn) as conn:
        client.enqueue("t", {"n": 1}, conn=conn)
        client.enqueue_many([("t", {"n": 2})], conn=conn)
        before_commit = until_marker(listener, pg_dsn, schema)
        conn.commit()
        after_commit = until_marker(listener, pg_dsn, schema)
    assert (before_commit, after_commit) == ([], ["default"])  # one per queue and transaction


def test_the_async_client_wakes_after_its_commit_too(pg_dsn, schema):
    async def scenario() -> None:
        async with jobrun.AsyncClient(pg_dsn, schema=schema) as client:
            await client.enqueue("t", {"n": 1})
            await client.enqueue_many([("t", {"n": 2})])

    with listen(pg_dsn, schema) as listener:
        asyncio.run(scenario())
        got = until_marker(listener, pg_dsn, schema)
    assert got == ["default", "default"]


def _op_with_then_steps(channel: str):
    """A step whose follow-up fails, then a failing step whose follow-up notifies."""
    first = yield ops.Step("SELECT %(x)s::integer + 1 AS n", {"x": 1},
                           then=ops.Step("SELECT 1 / 0 AS n", {}))
    assert first == [{"n": 2}]
    yield ops.Step("SELECT 1 / %(zero)s::integer AS n", {"zero": 0},
                   then=ops.Step("SELECT pg_notify(%(channel)s, 'then')", {"channel": channel}))
    raise AssertionError("a failed step returned")


def test_a_steps_then_runs_whatever_its_outcome_and_its_own_failure_fails_nothing(pg_dsn, schema):
    channel = f"{schema}_ready"
    outcomes = []
    with listen(pg_dsn, schema) as listener:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for direct in (True, False):
                op = _op_with_then_steps(channel)
                try:
                    drive(op, conn, direct=direct)
                except JobrunError as exc:
                    outcomes.append(type(exc).__name__)
                outcomes.append(conn.execute("SELECT 1").fetchone()[0])  # usable after

        async def on_async() -> None:
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
                for direct in (True, False):
                    try:
                        await drive_async(_op_with_then_steps(channel), conn, direct=direct)
                    except JobrunError as exc:
                        outcomes.append(type(exc).__name__)
                    outcomes.append((await (await conn.execute("SELECT 1")).fetchone())[0])

        asyncio.run(on_async())
        sent = until_marker(listener, pg_dsn, schema)
    assert sent == ["then"] * 4  # the follow-up of the failed step ran each time
    assert outcomes == ["JobrunError", 1] * 4  # division by zero, then the connection usable
