"""The completer against a real PostgreSQL: nothing submitted is dropped."""

from __future__ import annotations

import asyncio

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.worker.completer import Completer, Completion
from jobrun.worker.claimer import claim_params


def test_a_statement_error_keeps_the_batch_until_it_can_be_written(pg_dsn, schema, client):
    job_id = client.enqueue("noop").job.id
    q = for_schema(schema)
    owner = "test:1:completer"
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        [row] = conn.execute(q.claim_jobs, claim_params(["default"], 1, owner, 60)).fetchall()
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
