"""The claim's estimated cost does not grow with the depth of the queue, aging on or off.

PostgreSQL JIT-compiles a statement whose estimated cost passes jit_above_cost (100,000 by
default), and compiling the claim costs seconds (2.5 s at 1M queued on PostgreSQL 15), while
running it costs milliseconds. A claim whose estimate grew with the queue's depth (a LIMIT the
planner cannot evaluate is taken as a tenth of the rows) was compiled on every call once the
queue was deep enough: claims at 1M queued took seconds where JIT is available. Checked on the
plan's estimate, so it holds whether or not this server has JIT; where it has, the claim's
EXPLAIN ANALYZE must also show no JIT.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params

pytestmark = pytest.mark.db

DEEP = 150_000  # past the depth (~120k) at which the old claim's estimate passed 100,000


def fill(conn, schema: str, queue: str, n: int) -> None:
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, priority, run_at)"
        " SELECT %s, 't', (i %% 201) - 100, now() - make_interval(secs => i %% 3600)"
        " FROM generate_series(1, %s) AS i").format(sql.Identifier(schema, "jobs")), [queue, n])
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))


def claim_cost(conn, schema: str, queue: str) -> float:
    q = for_schema(schema)
    plan = conn.execute("EXPLAIN (FORMAT JSON) " + q.claim_jobs,
                        claim_params([queue], 50, "o", 30)).fetchone()[0]
    return plan[0]["Plan"]["Total Cost"]


@pytest.mark.parametrize("aging", [None, "1s"])
def test_the_claims_estimate_is_flat_in_the_depth_of_the_queue(pg_dsn, client, schema, aging):
    client.queue_add("deep", aging=aging)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        fill(conn, schema, "deep", 2_000)
        shallow = claim_cost(conn, schema, "deep")
        fill(conn, schema, "deep", DEEP - 2_000)
        if aging:  # rows spread over the levels aging writes (a few batches suffice)
            for _ in range(4):
                conn.execute(for_schema(schema).age_queued,
                             {"queues": ["deep"], "batch": 5_000, "start": -100})
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))
        deep = claim_cost(conn, schema, "deep")
        jit_above = float(conn.execute("SELECT current_setting('jit_above_cost')").fetchone()[0])
        assert deep < 1.5 * shallow, (shallow, deep)
        assert deep < jit_above, (deep, jit_above)
        with conn.transaction(force_rollback=True):
            text = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + for_schema(schema).claim_jobs,
                claim_params(["deep"], 50, "o", 30)).fetchall())
        assert "JIT:" not in text, text
        assert "Index Scan using jobs_claim on jobs" in text and "Seq Scan on jobs" not in text, text
