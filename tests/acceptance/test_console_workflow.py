"""The console's workflow page in a real headless Chromium against a real `jobrun web`: the
graph of a chord with each member's live status, reached from a member's job page, and the
callback's node turning queued once its parents succeeded (fixtures: test_console.py's)."""

from __future__ import annotations

import json

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from jobrun import workflows as wf
from tests.acceptance.test_console import browser, expect, page, web  # noqa: F401
from tests.dbview import lease


def finish_all(pg_dsn, schema, n):
    with psycopg.connect(pg_dsn, row_factory=dict_row) as conn:
        for row in lease(conn, schema, n, "m1"):
            conn.execute(sql.SQL("SELECT {s}.finish_jobs(ARRAY[%s::bigint], ARRAY[%s::bigint],"
                                 " ARRAY['succeeded'], ARRAY['succeeded'], 'none', 'm1',"
                                 " results => ARRAY[%s])").format(s=sql.Identifier(schema)),
                         [row["id"], row["lease_token"], json.dumps(row["id"])])


def test_the_workflow_graph_shows_live_statuses(page, client, pg_dsn, schema):
    made = client.enqueue_workflow(wf.chord(["p", "q"], "cb"))
    p, q, cb = made.job_ids
    page.goto(page.url.split("#")[0] + f"#/jobs/{cb}")
    page.click("#job-workflow")
    graph = page.locator("svg.workflow-graph")
    expect(graph.locator("a.node")).to_have_count(3)
    expect(graph.locator("line.edge")).to_have_count(2)
    expect(graph.locator(f'a.node[data-job="{cb}"]')).to_have_class("node status waiting")
    expect(graph.locator(f'a.node[data-job="{p}"]')).to_have_class("node status queued")
    finish_all(pg_dsn, schema, 2)
    expect(graph.locator(f'a.node[data-job="{p}"]')).to_have_class("node status succeeded")
    expect(graph.locator(f'a.node[data-job="{cb}"]')).to_have_class("node status queued")
    page.click("#cancel-workflow")
    expect(graph.locator(f'a.node[data-job="{cb}"]')).to_have_class("node status cancelled")
