"""Plans of the HTTP API's lists and per-task figures, and of the events stream's summary, at
100,000 jobs (JOBRUN_PLAN_ROWS=1000000 checks them at a million): every read walks an index
and stops by a LIMIT or at the queue's depth; none reads the table (a sequential scan of jobs
or job_attempts), and none reads more rows than its bound (checked on the executed plan,
EXPLAIN ANALYZE)."""

from __future__ import annotations

import itertools
import json
import os

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from benchmarks import fill
from jobrun.sql import for_schema
from jobrun.web import reads
from tests.conftest import _drop_schema, _new_schema

ROWS = int(os.environ.get("JOBRUN_PLAN_ROWS", "100000"))
QUEUED = ROWS // 25  # fill.history: the newest 4 % queued


@pytest.fixture(scope="module")
def big(pg_dsn):
    name = _new_schema(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        fill.history(conn, name, ROWS)
    yield name
    _drop_schema(pg_dsn, name)


def executed(pg_dsn: str, text: str, params: dict) -> dict:
    """The executed plan (a custom plan, as the web pool's sessions make them)."""
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SET plan_cache_mode = force_custom_plan")
        row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + text, params).fetchone()
    plan = row["QUERY PLAN"]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def table_reads(plan: dict) -> list[tuple[str, str | None, float]]:
    """(node type, index, rows it read over all loops: produced or removed by a filter) of
    each scan of a table."""
    return [(n["Node Type"], n.get("Index Name"),
             (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)
              + n.get("Rows Removed by Index Recheck", 0)) * n.get("Actual Loops", 1))
            for n in nodes(plan) if n.get("Relation Name") in ("jobs", "job_attempts")]


def indexes(plan: dict) -> set[str]:
    return {n["Index Name"] for n in nodes(plan) if "Index Name" in n}


FILTERS = {
    "statuses": [None, ["dead"], ["queued", "leased"], ["cancelled"]],
    "queue": [None, "rare"],
    "task": [None, "bench.t7", "bench.rare"],
    "schedule": [None, "bench.nightly"],
    "q": [None, "key-99"],
    "before": [None, ROWS // 2],
}


@pytest.mark.parametrize("combo", list(itertools.product(*FILTERS.values())),
                         ids=lambda c: ",".join(str(v) for v in c if v is not None) or "none")
def test_every_jobs_filter_is_an_index_walk_bounded_by_the_scan(pg_dsn, big, combo):
    params = dict(zip(FILTERS, combo))
    residual = (params["statuses"] or params["queue"] or params["q"]
                or (params["task"] and params["schedule"]))
    scan = reads.SCAN if residual else 50
    plan = executed(pg_dsn, for_schema(big).web_list_jobs, {**params, "limit": 50, "scan": scan})
    scans = table_reads(plan)
    assert scans and all(t != "Seq Scan" for t, _, _ in scans), scans
    if params["task"] == "bench.rare":
        assert "jobs_task_id" in indexes(plan), scans
    # The walk reads no more than `scan` ids, each is read once more by id, and a short page
    # walks the ids once more to say where it stopped.
    assert len(scans) in (2, 3) and all(rows <= scan for _, _, rows in scans), scans


def figures_plan(pg_dsn: str, schema: str, task: str | None) -> dict:
    return executed(pg_dsn, for_schema(schema).web_task_figures, {
        "window": reads.TASK_WINDOW, "sample": reads.TASK_SAMPLE, "stale_after": 30.0,
        "task": task})


def test_task_figures_read_through_their_indexes_within_their_bound(pg_dsn, big):
    plan = figures_plan(pg_dsn, big, None)
    scans = table_reads(plan)
    assert all(t != "Seq Scan" for t, _, _ in scans), scans
    assert {"jobs_queued_task", "jobs_leased", "jobs_finished", "job_attempts_finished",
            "jobs_pkey"} <= indexes(plan), scans
    # The queued jobs are counted from the index alone (fill.history ends with VACUUM, so
    # every page is all-visible), the depth of the queue and no more; the samples stop at
    # their LIMIT.
    with psycopg.connect(pg_dsn) as conn:
        depth = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE status = 'queued'").format(
            sql.Identifier(big, "jobs"))).fetchone()[0]
    queued = [n for n in nodes(plan) if n.get("Index Name") == "jobs_queued_task"]
    assert [(n["Node Type"], n["Actual Rows"], n["Heap Fetches"]) for n in queued] == [
        ("Index Only Scan", depth, 0)]
    assert all(rows <= max(QUEUED, reads.TASK_SAMPLE) for _, _, rows in scans), scans
    assert sum(rows for _, _, rows in scans) <= QUEUED + 3 * reads.TASK_SAMPLE + ROWS // 1000


def test_one_task_s_figures_count_only_its_queued_jobs(pg_dsn, big):
    every = figures_plan(pg_dsn, big, None)
    one = figures_plan(pg_dsn, big, "bench.t7")
    queued = [n["Actual Rows"] for n in nodes(one) if n.get("Index Name") == "jobs_queued_task"]
    assert len(queued) == 1 and 0 < queued[0] < QUEUED // 5, queued
    assert sum(r for _, _, r in table_reads(one)) < sum(r for _, _, r in table_reads(every))


def test_the_stream_summary_reads_through_partial_indexes_and_ranges(pg_dsn, big):
    q = for_schema(big)
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        highest = conn.execute(q.stream_highest_id).fetchone()["id"]
        mark = conn.execute("SELECT now() - interval '2 s' AS t").fetchone()["t"]
    cases = [
        (q.stream_queues, {"lag": 1.0, "fail_window": 300.0},
         {"jobs_claim", "jobs_leased", "job_attempts_failed"}, QUEUED),
        (q.stream_moves, {"after": highest - 100, "since": mark, "upto": mark, "sample": 500},
         {"jobs_pkey", "jobs_finished"}, 100),
        (q.stream_recent_waits, {"upto": mark, "window": 300.0, "sample": 500},
         {"jobs_finished"}, 500),
    ]
    for text, params, used, bound in cases:
        plan = executed(pg_dsn, text, params)
        scans = table_reads(plan)
        assert all(t != "Seq Scan" for t, _, _ in scans), scans
        assert used <= indexes(plan), scans
        assert all(rows <= bound for _, _, rows in scans), scans
