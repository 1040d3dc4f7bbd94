"""The claim statements' estimated cost (claim_jobs, claim_plain) does not grow with the depth of
the queue, aging on or off.

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
from jobrun.worker.claimer import claim_params, plain_claim_params

pytestmark = pytest.mark.db

DEEP = 150_000  # past the depth (~120k) at which the old claim's estimate passed 100,000


def fill(conn, schema: str, queue: str, n: int) -> None:
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, priority, run_at)"
        " SELECT %s, 't', (i %% 201) - 100, now() - make_interval(secs => i %% 3600)"
        " FROM generate_series(1, %s) AS i").format(sql.Identifier(schema, "jobs")), [queue, n])
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))


def claim_params_for(statement: str, queue: str) -> dict:
    if statement == "claim_plain":
        return plain_claim_params(queue, 50, "o", 30)
    return claim_params([queue], 50, "o", 30)


def claim_cost(conn, schema: str, queue: str, statement: str = "claim_jobs") -> float:
    plan = conn.execute("EXPLAIN (FORMAT JSON) " + getattr(for_schema(schema), statement),
                        claim_params_for(statement, queue)).fetchone()[0]
    return plan[0]["Plan"]["Total Cost"]


# claim_plain is measured from 20,000 rows: the estimate of its update's lookups by primary
# key grows with that index's height while the table is small (88 at 2,000 rows, 366 at
# 20,000), then stays put (432 at 150,000, 441 at 1M). A LIMIT the planner cannot read, taken
# as a tenth of the queue, would still grow 7.5 times from there.
@pytest.mark.parametrize("statement, shallow_rows", [("claim_jobs", 2_000), ("claim_plain", 20_000)])
@pytest.mark.parametrize("aging", [None, "1s"])
def test_the_claims_estimate_is_flat_in_the_depth_of_the_queue(pg_dsn, client, schema, aging,
                                                               statement, shallow_rows):
    client.queue_add("deep", aging=aging)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        fill(conn, schema, "deep", shallow_rows)
        shallow = claim_cost(conn, schema, "deep", statement)
        fill(conn, schema, "deep", DEEP - shallow_rows)
        if aging:  # rows spread over the levels aging writes (a few batches suffice)
            for _ in range(4):
                conn.execute(for_schema(schema).age_queued,
                             {"queues": ["deep"], "batch": 5_000, "start": -100})
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))
        deep = claim_cost(conn, schema, "deep", statement)
        jit_above = float(conn.execute("SELECT current_setting('jit_above_cost')").fetchone()[0])
        assert deep < 1.5 * shallow, (shallow, deep)
        assert deep < jit_above, (deep, jit_above)
        with conn.transaction(force_rollback=True):
            text = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + getattr(for_schema(schema), statement),
                claim_params_for(statement, "deep")).fetchall())
        assert "JIT:" not in text, text
        assert "Index Scan using jobs_claim on jobs" in text and "Seq Scan on jobs" not in text, text
