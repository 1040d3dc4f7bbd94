"""Plans of the claim with and without limits, at depth: an unlimited queue's jobs come from
the claim index as before (and no limit row is locked), a limited queue's too, and the
limit's bookkeeping reads its rows by primary key, never by scanning jobs."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params

pytestmark = pytest.mark.db


def plan(conn, schema: str, queues: list[str]) -> str:
    q = for_schema(schema)
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + q.claim_jobs,
                            claim_params(queues, 50, "o", 30)).fetchall()
    return "\n".join(r[0] for r in rows)


def jobs_scans(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if " on jobs" in line and "Scan" in line]


def test_claim_plans_at_depth(pg_dsn, client, schema):
    client.declare_queue("limited")
    client.enqueue_many([("t", i) for i in range(20000)])
    client.enqueue_many([("t", i) for i in range(20000)], queue="limited")
    client.enqueue_many([{"task": "t", "concurrency_key": f"k{i % 50}"} for i in range(2000)],
                        queue="limited")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET concurrency = 10000, rate_limit = 100000,"
                             " rate_period = '1 minute' WHERE name = 'limited'").format(
            sql.Identifier(schema, "queues")))
        q = for_schema(schema)
        conn.execute(q.claim_jobs, claim_params(["limited"], 500, "o", 30))  # some leased
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))
        free = plan(conn, schema, ["default"])
        limited = plan(conn, schema, ["limited"])
    # The unlimited queue: the claim index, as before the limits; the limit rows untouched.
    assert [s for s in jobs_scans(free) if "jobs_claim" not in s and "jobs_pkey" not in s] == [], free
    assert any("Index Scan using jobs_claim" in s for s in jobs_scans(free)), free
    assert "Seq Scan on jobs" not in free and "Bitmap" not in free, free
    limit_rows = [ln for ln in free.splitlines() if "queue_claims" in ln and "Scan" in ln]
    assert limit_rows and all("never executed" in ln for ln in limit_rows), free
    # The limited queue: the same index, and its bookkeeping by key.
    assert any("Index Scan using jobs_claim" in s for s in jobs_scans(limited)), limited
    assert "Seq Scan on jobs" not in limited, limited
    assert "Seq Scan on key_leases" not in limited or "rows=0" in limited, limited
