"""The completer against a real PostgreSQL: nothing submitted is dropped."""

from __future__ import annotations

import asyncio
import time

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.testing import wait_for_async
from jobrun.worker.completer import Completer, Completion

from tests.db.nested_plans import plan_of, report_plans_async
from tests.dbview import lease


def test_a_statement_error_keeps_the_batch_until_it_can_be_written(pg_dsn, schema, client):
    job_id = client.enqueue("noop").job.id
    q = for_schema(schema)
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        [row] = lease(conn, schema, 1, owner)
        jobs = sql.Identifier(schema, "jobs")

        async def scenario() -> bool:
            errors = asyncio.Event()
            completer = Completer(pg_dsn, q, owner, "host", 1, on_db_error=errors.set)
            # The statement fails (not the connection): the table is away for a while.
            conn.execute(sql.SQL("ALTER TABLE {} RENAME TO jobs_away").format(jobs))
            completer.start()
            completer.submit(Completion(id=job_id, token=row["lease_token"], status="succeeded",
                                        outcome="succeeded", result="null"))
            await asyncio.wait_for(errors.wait(), 20)
            conn.execute(sql.SQL("ALTER TABLE {} RENAME TO jobs").format(
                sql.Identifier(schema, "jobs_away")))
            written = await completer.drain(20)
            await completer.stop()
            return written

        assert asyncio.run(scenario())
    assert client.get(job_id).status == "succeeded"


def _two_flushes(pg_dsn, schema, client, *, linger: float, drain_at_once: bool = False):
    """Two results, the second arriving while the first one's flush is held up by a row lock.
    Returns the flushes' end times, and how long the drain took: called once the first flush
    is done (``drain_at_once``), else once both are."""
    ids = [client.enqueue("noop").job.id for _ in range(2)]
    q = for_schema(schema)
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn, \
            psycopg.connect(pg_dsn) as blocker:
        rows = lease(conn, schema, 2, owner)
        token = {r["id"]: r["lease_token"] for r in rows}
        blocker.execute(sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(
            sql.Identifier(schema, "jobs")), [ids[0]])

        async def scenario() -> tuple[list[float], float]:
            flushed: list[float] = []
            loop = asyncio.get_running_loop()
            completer = Completer(pg_dsn, q, owner, "host", 1, linger=lambda: linger,
                                  on_recorded=lambda done: flushed.append(loop.time()))
            completer.start()
            for job_id in ids:
                completer.submit(Completion(id=job_id, token=token[job_id], status="succeeded",
                                            outcome="succeeded", result="null"))
                await wait_for_async(lambda: completer.writing, 20,
                                     message="the first flush, held by the row lock")
            blocker.commit()
            await wait_for_async(lambda: len(flushed) == (1 if drain_at_once else 2),
                                 20 + linger, message="the flushes before the drain")
            started = loop.time()
            assert await completer.drain(60)
            took = loop.time() - started
            await completer.stop()
            return flushed, took

        flushed, took = asyncio.run(scenario())
    assert [client.get(i).status for i in ids] == ["succeeded", "succeeded"]
    assert len(flushed) == 2
    return flushed, took


def test_results_during_a_flush_are_written_right_after_it_when_the_queue_keeps_up(
        pg_dsn, schema, client):
    flushed, _ = _two_flushes(pg_dsn, schema, client, linger=0.0)
    assert flushed[1] - flushed[0] < 2.0


def test_with_a_backlog_the_next_flush_waits_the_linger_so_the_batch_fills(pg_dsn, schema, client):
    flushed, _ = _two_flushes(pg_dsn, schema, client, linger=1.0)
    assert flushed[1] - flushed[0] >= 1.0


def test_with_a_backlog_results_that_come_after_a_flush_wait_the_linger_too(
        pg_dsn, schema, client):
    """A child sends the results of jobs it ran back to back together, so with a backlog they
    often come just after a flush rather than during one: the next flush still starts a linger
    after the last one ended, and writes them with whatever came meanwhile."""
    linger = 1.0
    ids = [client.enqueue("noop").job.id for _ in range(3)]
    q = for_schema(schema)
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        rows = lease(conn, schema, 3, owner)
        token = {r["id"]: r["lease_token"] for r in rows}

        async def scenario() -> list[tuple[float, int]]:
            flushed: list[tuple[float, int]] = []
            loop = asyncio.get_running_loop()
            completer = Completer(pg_dsn, q, owner, "host", 1, linger=lambda: linger,
                                  on_recorded=lambda done: flushed.append((loop.time(), len(done))))
            completer.start()

            def done(job_id: int) -> Completion:
                return Completion(id=job_id, token=token[job_id], status="succeeded",
                                  outcome="succeeded", result="null")

            completer.submit(done(ids[0]))
            await wait_for_async(lambda: flushed, 20, message="the first flush")
            for job_id in ids[1:]:  # after it, together: a child's results of two jobs
                completer.submit(done(job_id))
            await wait_for_async(lambda: len(flushed) == 2, 20 + linger, message="the second")
            await completer.stop()
            return flushed

        flushed = asyncio.run(scenario())
    assert [client.get(i).status for i in ids] == ["succeeded"] * 3
    assert [n for _, n in flushed] == [1, 2]
    assert flushed[1][0] - flushed[0][0] >= linger


def test_the_first_batch_never_lingers_however_young_the_clock(pg_dsn, schema, client):
    """The first statement follows no other: it does not wait a linger counted from the
    monotonic clock's zero (on a machine booted less than a linger ago it did). The linger
    here is longer than this host has been up, whatever its uptime."""
    [job] = [client.enqueue("noop").job]
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        [row] = lease(conn, schema, 1, owner)

    async def scenario() -> None:
        recorded: list[int] = []
        completer = Completer(pg_dsn, for_schema(schema), owner, "host", 1,
                              linger=lambda: time.monotonic() + 600.0,
                              on_recorded=lambda done: recorded.extend(c.id for c in done))
        completer.start()
        completer.submit(Completion(id=job.id, token=row["lease_token"], status="succeeded",
                                    outcome="succeeded", result="null"))
        try:
            await wait_for_async(lambda: recorded == [job.id], 20, message="the first flush")
        finally:
            await completer.stop()

    asyncio.run(scenario())
    assert client.get(job.id).status == "succeeded"


def test_a_drain_cuts_a_linger_short(pg_dsn, schema, client):
    """Stopping does not wait out a backlog's linger: the results are written at once."""
    _, took = _two_flushes(pg_dsn, schema, client, linger=600.0, drain_at_once=True)
    assert took < 30  # not the 600 s linger


def test_the_completion_looks_jobs_up_by_id_after_the_table_grows_under_its_cached_plan(
        pg_dsn, schema, client):
    """The completer's statement is prepared: once PostgreSQL settles on a generic plan it keeps
    it until the table's statistics change. A plan made while `jobs` was a few pages read the
    batch's rows with a sequential scan, and went on scanning the whole table as it grew."""
    q = for_schema(schema)
    owner = "test:1:completer"
    jobs = sql.Identifier(schema, "jobs")
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        # No autovacuum ANALYZE in between: it would re-plan by chance.
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(jobs))
        client.enqueue_many([("noop", i) for i in range(8)])
        rows = lease(conn, schema, 8, owner)

        async def scenario() -> str:
            recorded: list[int] = []
            completer = Completer(pg_dsn, q, owner, "host", 1,
                                  on_recorded=lambda done: recorded.extend(c.id for c in done))
            completer.start()
            for n, row in enumerate(rows, 1):  # one statement each: past the custom plans
                completer.submit(Completion(id=row["id"], token=row["lease_token"],
                                            status="succeeded", outcome="succeeded", result="null"))
                await wait_for_async(lambda: len(recorded) == n, 20, message="each flush")
            client.enqueue_many([("noop", i) for i in range(5000)])
            [last] = lease(conn, schema, 1, owner)
            # The update is finish_jobs' (migration 0014): its plan, as the session cached it.
            plans = await report_plans_async(completer._conn)
            completer.submit(Completion(id=last["id"], token=last["lease_token"],
                                        status="succeeded", outcome="succeeded", result="null"))
            await wait_for_async(lambda: len(recorded) == len(rows) + 1, 20, message="the last")
            await completer.stop()
            return plan_of(plans, "WITH r AS")

        plan = asyncio.run(scenario())
    assert "jobs_pkey" in plan and "Seq Scan on jobs" not in plan, plan


def test_a_task_limit_that_applied_is_written_to_its_failed_jobs_only(pg_dsn, schema, client):
    """A completion carrying the task's lower max_attempts (limit) writes it to its job, so the
    job shows the limit that applied; one without leaves the job's own, a limit that is not
    lower changes nothing (never raised), and a lease this master lost is left alone."""
    ids = [client.enqueue("noop", max_attempts=5).job.id for _ in range(4)]
    q = for_schema(schema)
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        token = {r["id"]: r["lease_token"] for r in lease(conn, schema, 4, owner)}
        token[ids[3]] += 1  # a lease lost meanwhile: the guard refuses it

        async def scenario() -> None:
            completer = Completer(pg_dsn, q, owner, "host", 1)
            completer.start()
            for job_id, status, limit in zip(ids, ("dead", "queued", "dead", "dead"),
                                             (1, None, 9, 1)):
                completer.submit(Completion(id=job_id, token=token[job_id], status=status,
                                            outcome="failed", error="boom", limit=limit))
            assert await completer.drain(20)
            await completer.stop()
        asyncio.run(scenario())
    shown = [(j.status, j.attempts, j.max_attempts) for j in map(client.get, ids)]
    assert shown == [("dead", 1, 1), ("queued", 1, 5), ("dead", 1, 5), ("leased", 1, 5)]
