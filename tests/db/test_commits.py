"""What the master's claim and completion connections wait for when they commit, against a
real PostgreSQL: the WAL flush, as the DSN says, for both.

A claim that did not wait (synchronous_commit=off) was lost whole in a database crash, and
the next claim of its jobs drew the same lease tokens again: two starts under one token,
which fencing by token cannot tell apart (tests/acceptance/test_faults.py,
test_postgres_restart_immediate_under_load, saw it). Outcomes must be durable when written.
"""

from __future__ import annotations

import asyncio

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.worker.claimer import Claimer
from jobrun.worker.completer import Completer, Completion

from tests.dbview import lease

SHOWN = ["synchronous_commit", "work_mem"]


def with_options(dsn: str) -> str:
    """``dsn`` with options of its own: one every connection keeps, and commits that wait for
    the flush (the test cluster's default is not to)."""
    given = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(dsn, options=f"{given} -c work_mem=5MB -c synchronous_commit=on".strip())


async def settings(conn: psycopg.AsyncConnection) -> dict[str, str]:
    cur = await conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [SHOWN])
    return {row["name"]: row["setting"] for row in await cur.fetchall()}


def test_the_claim_connection_waits_for_the_flush_and_keeps_the_dsn_options(pg_dsn, schema):
    async def scenario() -> tuple[dict[str, str], dict[str, str]]:
        claimer = Claimer(with_options(pg_dsn), for_schema(schema), "test:1:claimer", settings=None,
                          handout=None, metrics=None, on_db_ok=lambda: None)
        await claimer.connect()
        first = await settings(claimer.conn)
        await claimer.conn.close()  # a reconnect carries the same options
        await claimer.unclaim([])
        again = await settings(claimer.conn)
        await claimer.close()
        return first, again

    first, again = asyncio.run(scenario())
    assert first == again == {"synchronous_commit": "on", "work_mem": "5120"}


def test_outcomes_are_written_by_a_connection_that_waits_for_the_flush(pg_dsn, schema, client):
    job_id = client.enqueue("noop").job.id
    q = for_schema(schema)
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        [row] = lease(conn, schema, 1, owner)

    async def scenario() -> dict[str, str]:
        completer = Completer(with_options(pg_dsn), q, owner, "host", 1)
        completer.start()
        completer.submit(Completion(id=job_id, token=row["lease_token"], status="succeeded",
                                    outcome="succeeded", result="null"))
        assert await completer.drain(20)
        shown = await settings(completer._conn)
        await completer.stop()
        return shown

    assert asyncio.run(scenario()) == {"synchronous_commit": "on", "work_mem": "5120"}
    assert client.get(job_id).status == "succeeded"
