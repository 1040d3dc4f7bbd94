"""Plans of the hot-path statements that update jobs by id, against a real PostgreSQL.

They must look jobs up by primary key even under a cached generic plan made with the
statistics of a freshly filled queue (nothing leased when ANALYZE ran): the partial index on
leased rows then looks nearly empty to the planner, and a plan through it scans every leased
row for each job of a batch (see "Guards by id" in jobrun/sql/queries.sql).
"""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg import sql

from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params

BY_ID = ["complete_jobs", "heartbeat", "unclaim", "complete_transactional", "record_handler_session"]


def positional(text: str) -> tuple[str, int]:
    """%(name)s / %(name)b placeholders as $1, $2, ... (each name once), for PREPARE."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, text), len(names)


@pytest.mark.parametrize("name", BY_ID)
def test_updates_by_id_use_the_primary_key_under_a_generic_plan(pg_dsn, client, schema, name):
    client.enqueue_many([("t", i) for i in range(3000)])
    q = for_schema(schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))  # none leased
        claimed = conn.execute(q.claim_jobs, claim_params(["default"], 2000, "o", 30)).fetchall()
        assert len(claimed) == 2000
        text, count = positional(getattr(q, name))
        conn.execute(f"PREPARE s AS {text}")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        rows = conn.execute(f"EXPLAIN EXECUTE s({', '.join(['NULL'] * count)})").fetchall()
    plan = "\n".join(row[0] for row in rows)
    assert "jobs_pkey" in plan and "jobs_leased" not in plan, plan
