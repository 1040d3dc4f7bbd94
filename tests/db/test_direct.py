"""Statements run on libpq directly (jobrun/store/direct.py), against a real PostgreSQL: the
same rows as psycopg's cursor gives, its errors, a broken or shared connection, a cancel."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors
from psycopg.rows import dict_row

from jobrun.store import db
from jobrun.testing import wait_for_async
from jobrun.store.arrays import Int8s, Texts
from jobrun.store.direct import Statement

from tests.profiles import examples

MIXED = ("SELECT $1::bigint AS n, $2::text AS t, $3::float8 AS f, $4::bigint[] AS ns,"
         " $5::text[] AS ts, $6::jsonb AS j, now() - now() AS zero, NULL::text AS nothing")

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=40)
bigints = st.integers(-2**63, 2**63 - 1)
values = st.tuples(
    st.one_of(st.none(), bigints), st.one_of(st.none(), texts),
    st.one_of(st.none(), st.floats(allow_nan=False)),
    st.lists(st.one_of(st.none(), bigints), max_size=5).map(Int8s),
    st.lists(st.one_of(st.none(), texts), max_size=5).map(Texts),
    st.one_of(st.none(), st.just('{"a": [1, 2, "x"]}'), st.just("[]"), st.just('"é\\u2603"')))


def run(coro):
    return uvloop.run(coro)


async def connect(dsn: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row,
                                                 prepare_threshold=0)


@pytest.fixture(scope="module")
def shared(pg_dsn):
    """One connection for every example (a new one each would be most of the run)."""
    loop = uvloop.new_event_loop()
    conn = loop.run_until_complete(connect(pg_dsn))
    yield loop, conn, Statement("mixed", MIXED)
    loop.run_until_complete(conn.close())
    loop.close()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(vals=values)
def test_rows_are_those_psycopgs_cursor_gives(shared, vals):
    loop, conn, statement = shared

    async def both():
        mine = await statement.rows(conn, list(vals))
        cur = psycopg.AsyncRawCursor(conn, row_factory=dict_row)
        await cur.execute(MIXED, list(vals), prepare=True)
        return mine, await cur.fetchall()

    mine, theirs = loop.run_until_complete(both())
    assert mine == theirs and len(mine) == 1
    assert mine[0]["n"] == vals[0] and mine[0]["t"] == vals[1] and mine[0]["ns"] == list(vals[3])


def test_a_statement_error_raises_its_class_and_the_connection_goes_on(pg_dsn):
    async def scenario():
        conn = await connect(pg_dsn)
        statement = Statement("div", "SELECT 1 / $1::integer AS q")
        with pytest.raises(errors.DivisionByZero, match="division by zero"):
            await statement.rows(conn, [0])
        assert db.usable(conn)
        got = await statement.rows(conn, [1])
        cur = await conn.execute("SELECT 2 AS two")  # psycopg's own calls too
        theirs = await cur.fetchall()
        await conn.close()
        return got, theirs

    assert run(scenario()) == ([{"q": 1}], [{"two": 2}])


def test_a_parameter_without_a_type_then_with_one_prepares_again(pg_dsn):
    async def scenario():
        conn = await connect(pg_dsn)
        statement = Statement("maybe", "SELECT $1::bigint[] AS ids")
        got = [await statement.rows(conn, [v]) for v in ([], Int8s([1, None]), [], Int8s([]))]
        cur = await conn.execute("SELECT count(*) AS n FROM pg_prepared_statements"
                                 " WHERE name LIKE 'jobrun_maybe_%%'", prepare=False)
        [count] = await cur.fetchall()
        await conn.close()
        return got, count["n"]

    got, prepared = run(scenario())
    assert got == [[{"ids": []}], [{"ids": [1, None]}], [{"ids": []}], [{"ids": []}]]
    assert prepared == 2  # one plan per set of parameter types, each reused


def test_a_connection_broken_underneath_raises_and_reads_as_broken(pg_dsn):
    async def scenario():
        conn = await connect(pg_dsn)
        statement = Statement("one", "SELECT $1::integer AS one")
        assert await statement.rows(conn, [1]) == [{"one": 1}]
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", [conn.info.backend_pid])
        with pytest.raises(psycopg.OperationalError):
            await statement.rows(conn, [1])
        usable = db.usable(conn)
        again = await db.reconnect_async(conn, pg_dsn)
        got = await statement.rows(again, [1])  # prepared anew on the new connection
        await again.close()
        return usable, got

    assert run(scenario()) == (False, [{"one": 1}])


def test_psycopgs_calls_on_the_same_connection_wait_their_turn(pg_dsn):
    async def scenario():
        conn = await connect(pg_dsn)
        statement = Statement("slow", "SELECT $1::integer AS k, pg_sleep(0.05) IS NULL AS slept")

        async def theirs(k: int):
            cur = await conn.execute("SELECT %s::integer AS k", [k])
            return await cur.fetchall()

        got = await asyncio.gather(*[statement.rows(conn, [k]) if k % 2 else theirs(k)
                                     for k in range(8)])
        await conn.close()
        return got

    got = run(scenario())
    assert [rows[0]["k"] for rows in got] == list(range(8))


def test_a_statement_cancelled_in_flight_drops_its_connection(pg_dsn):
    async def scenario():
        conn = await connect(pg_dsn)
        statement = Statement("sleepy", "SELECT pg_sleep($1::float8) IS NULL AS slept")
        task = asyncio.ensure_future(statement.rows(conn, [5.0]))
        pid = conn.info.backend_pid
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            def sleeping() -> bool:
                return other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s"
                                     " AND state = 'active' AND query LIKE '%%pg_sleep%%'",
                                     [pid]).fetchone()[0] == 1
            await wait_for_async(sleeping, 10, message="the statement running")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        usable = db.usable(conn)
        await conn.close()
        return usable

    assert run(scenario()) is False


def test_a_statement_deallocated_behind_its_back_is_prepared_again(pg_dsn):
    async def scenario():
        conn = await connect(pg_dsn)
        statement = Statement("again", "SELECT $1::integer + 1 AS n")
        first = await statement.rows(conn, [1])
        await conn.execute("DEALLOCATE ALL", prepare=False)
        second = await statement.rows(conn, [2])
        await conn.close()
        return first, second

    assert run(scenario()) == ([{"n": 2}], [{"n": 3}])


def test_the_clients_own_connection_runs_operations_prepared_on_libpq(client):
    job = client.enqueue("t", {"x": 1}).job
    assert client.get(job.id).payload == {"x": 1}
    prepared = {row["name"]: row["statement"] for row in client._conn.execute(
        "SELECT name, statement FROM pg_prepared_statements", prepare=False).fetchall()}
    ours = [text for name, text in prepared.items() if name.startswith("jobrun_op")]
    assert any("INSERT INTO" in text for text in ours), prepared
    assert all("$1" in text for text in ours)  # numbered, as sent


def test_the_async_clients_own_connection_runs_operations_prepared_on_libpq(pg_dsn, schema):
    from jobrun import AsyncClient

    async def scenario():
        async with AsyncClient(pg_dsn, schema=schema) as client:
            job = (await client.enqueue("t", {"x": 2})).job
            got = await client.get(job.id)
            cur = await client._conn.execute("SELECT name, statement FROM pg_prepared_statements",
                                             prepare=False)
            return got.payload, {row["name"]: row["statement"] for row in await cur.fetchall()}

    payload, prepared = run(scenario())
    assert payload == {"x": 2}
    ours = [text for name, text in prepared.items() if name.startswith("jobrun_op")]
    assert any("INSERT INTO" in text for text in ours), prepared


def test_a_then_statement_goes_in_the_same_round_trip_and_commits_on_its_own(pg_dsn):
    """``then``: sent with the statement in pipeline mode, a transaction of its own after the
    statement's (it runs when the statement fails, its failure is ignored), prepared again
    like the statement when deallocated behind their backs."""
    table = "direct_then_log"
    note = Statement("then_note", f"INSERT INTO {table} (what) VALUES ($1::text)")
    add = Statement("then_add", "SELECT $1::integer + 1 AS n")
    divide = Statement("then_divide", "SELECT 1 / $1::integer AS n")

    def logged(conn) -> list[str]:
        return [r[0] for r in conn.execute(f"SELECT what FROM {table} ORDER BY id", prepare=False)]

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id serial, what text)")
        try:
            first = add.run(conn, [1], (note, ["after add"]))
            with pytest.raises(errors.DivisionByZero):
                divide.run(conn, [0], (note, ["after a failure"]))
            ignored = add.run(conn, [2], (divide, [0]))  # the follow-up's failure fails nothing
            conn.execute("DEALLOCATE ALL", prepare=False)
            again = add.run(conn, [3], (note, ["after DEALLOCATE ALL"]))
            status = conn.pgconn.pipeline_status
            log = logged(conn)
        finally:
            conn.execute(f"DROP TABLE {table}")
    assert (first[0], ignored[0], again[0]) == ([{"n": 2}], [{"n": 3}], [{"n": 4}])
    assert log == ["after add", "after a failure", "after DEALLOCATE ALL"]
    assert status == psycopg.pq.PipelineStatus.OFF  # the connection left as it was
