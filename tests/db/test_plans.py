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
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params
from jobrun.worker.heartbeat import Heartbeater
from tests.db.nested_plans import plan_of, report_plans

BY_ID = ["heartbeat", "unclaim", "record_handler_session", "cap_max_attempts"]


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


def _finish_params(rows: list[dict], name: str) -> dict:
    if name == "complete_transactional":
        [row] = rows[:1]
        return {"id": row["id"], "token": row["lease_token"], "owner": "o", "host": "h",
                "pid": 1, "child": 0, "result": "null", "log": None}
    batch = rows[:200]
    n = len(batch)
    return {"ids": [r["id"] for r in batch], "tokens": [r["lease_token"] for r in batch],
            "statuses": ["succeeded"] * n, "outcomes": ["succeeded"] * n, "delays": [0.0] * n,
            "errors": [None] * n, "tracebacks": [None] * n, "results": ["null"] * n,
            "children": [0] * n, "crashed": [0] * n, "logs": [None] * n, "refunds": [0] * n,
            "owner": "o", "host": "h", "pid": 1}


@pytest.mark.parametrize("name", ["complete_jobs", "complete_transactional"])
def test_finish_jobs_uses_the_primary_key_under_a_generic_plan(pg_dsn, client, schema, name):
    """The completions update through finish_jobs (migration 0014): its statement's plan, cached
    by PL/pgSQL for the session, is the one to check (an EXPLAIN shows only the call)."""
    client.enqueue_many([("t", i) for i in range(3000)])
    q = for_schema(schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))  # none leased
        claimed = conn.execute(q.claim_jobs, claim_params(["default"], 2000, "o", 30)).fetchall()
        assert len(claimed) == 2000
        rows = [{"id": r[0], "lease_token": r[1]} for r in claimed]
        conn.execute("SET plan_cache_mode = force_generic_plan")
        plans = report_plans(conn)
        done = conn.execute(getattr(q, name), _finish_params(rows, name)).fetchall()
    assert len(done) == (1 if name == "complete_transactional" else 200)
    plan = plan_of(plans, "WITH r AS")
    assert "jobs_pkey" in plan and "jobs_leased" not in plan, plan


def test_the_master_connections_that_update_by_id_plan_generically_without_sequential_scans(
        pg_dsn, schema):
    """The heartbeat's own connection carries the settings of the completer's (see
    BY_ID_SETTINGS), its statement timeout, and whatever options the DSN itself gives."""
    given = conninfo_to_dict(pg_dsn).get("options") or ""
    dsn = make_conninfo(pg_dsn, options=f"{given} -c work_mem=5MB".strip())
    hb = Heartbeater(dsn, for_schema(schema), "owner", 3.0, leases=list,
                     loop_alive=lambda period: True, on_fence=lambda lease, reason: None)
    try:
        assert hb._execute_renewal([], hb.clock() + 5) == []
        rows = hb._conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
            [["enable_seqscan", "plan_cache_mode", "work_mem", "statement_timeout"]]).fetchall()
        shown = {row["name"]: row["setting"] for row in rows}
    finally:
        hb._conn.close()
    timeout_ms = str(int(max(0.5, hb.period * 0.8) * 1000))
    assert shown == {"enable_seqscan": "off", "plan_cache_mode": "force_generic_plan",
                     "work_mem": "5120", "statement_timeout": timeout_ms}
