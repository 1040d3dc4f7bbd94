"""Read a test's schema from the test process: jobs, attempts, statuses, waits on them."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.testing import wait_for
from jobrun.worker.claimer import claim_params

FINAL = ("succeeded", "dead", "cancelled")


class Db:
    """Reads this test's schema."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row)
        self.schema = schema

    def rows(self, text: str, params=()) -> list[dict]:
        query = sql.SQL(text).format(s=sql.Identifier(self.schema))
        return self.conn.execute(query, params).fetchall()

    def job(self, job_id: int) -> dict:
        return self.rows("SELECT *, run_at - now() AS run_in FROM {s}.jobs WHERE id = %s", (job_id,))[0]

    def attempts(self, job_id: int) -> list[dict]:
        return self.rows("SELECT * FROM {s}.job_attempts WHERE job_id = %s ORDER BY lease_token",
                         (job_id,))

    def count(self, where: str = "true", params=()) -> int:
        return self.rows("SELECT count(*) AS n FROM {s}.jobs WHERE " + where, params)[0]["n"]

    def statuses(self, ids: list[int]) -> dict[int, str]:
        rows = self.rows("SELECT id, status FROM {s}.jobs WHERE id = ANY(%s)", (ids,))
        return {r["id"]: r["status"] for r in rows}

    def wait_status(self, ids: list[int] | int, statuses=FINAL, timeout: float = 20.0) -> None:
        ids = [ids] if isinstance(ids, int) else list(ids)
        wait_for(lambda: all(s in statuses for s in self.statuses(ids).values()),
                 timeout=timeout, message=f"jobs {ids[:10]}... to reach {statuses}")

    def result(self, job_id: int):
        attempts = self.attempts(job_id)
        assert attempts and attempts[-1]["outcome"] == "succeeded", attempts
        return attempts[-1]["result"]


def enqueue(client, items, **kw) -> list[int]:
    return [job_id for job_id, _ in client.enqueue_many(items, **kw)]


def lease(conn, schema: str, n: int, owner: str, ttl: float = 60) -> list[dict]:
    """Claim up to ``n`` jobs of the default queue as ``owner`` (the master's own claim
    statement), on ``conn``, a dict-row connection; the claimed rows."""
    return conn.execute(for_schema(schema).claim_jobs,
                        claim_params(["default"], n, owner, ttl)).fetchall()
