"""Operator reads of a real `jobrun web`: queues (pause/resume), workers, tasks, stats, and
the OpenAPI document it serves."""

from __future__ import annotations

import json

import psycopg
from psycopg import sql

import jobrun
from jobrun import config
from jobrun.web.app import create_app
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)


def test_queues_pause_resume(api):
    queues = {q["queue"]: q for q in api.get("/queues").json()}
    assert queues["default"]["paused"] is False and "queued" in queues["default"]
    assert api.post("/queues/default/pause").json()["paused"] is True
    assert {q["queue"]: q for q in api.get("/queues").json()}["default"]["paused"] is True
    assert api.post("/queues/default/resume").json()["paused"] is False
    r = api.post("/queues/nope/pause")
    assert r.status_code == 404 and r.json()["code"] == "not_found"
    assert api.post("/queues/bad name!/pause").status_code == 422


def test_workers_and_tasks(api, pg_dsn, web_schema):
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {}.workers (owner, host, pid, queues, tasks, concurrency)"
            " VALUES ('h:1:x', 'h', 1, '{{default}}', '{{w.served}}', 4)").format(
                sql.Identifier(web_schema)))
    workers = api.get("/workers").json()
    assert [(w["owner"], w["tasks"]) for w in workers] == [("h:1:x", ["w.served"])]
    done = api.post("/jobs", json={"task": "w.served"}).json()
    api.post("/jobs", json={"task": "w.served"})
    with psycopg.connect(pg_dsn) as conn:
        ident = sql.Identifier(web_schema)
        conn.execute(sql.SQL("INSERT INTO {}.job_attempts (job_id, lease_token, attempt,"
                             " started_at, finished_at, outcome) VALUES"
                             " (%s, 1, 1, now() - interval '3 s', now() - interval '1 s',"
                             " 'failed'), (%s, 2, 2, now() - interval '1 s', now(),"
                             " 'succeeded')").format(ident), [done["id"], done["id"]])
        conn.execute(sql.SQL("UPDATE {}.jobs SET status = 'succeeded', finished_at = now()"
                             " WHERE id = %s").format(ident), [done["id"]])
    tasks = {t["task"]: t for t in api.get("/tasks").json()}
    served = tasks["w.served"]
    assert served["counts"]["queued"] == 1 and served["counts"]["succeeded"] == 1
    assert served["runs"] == 2 and served["success_rate"] == 0.5
    assert abs(served["mean_run_seconds"] - 1.5) < 0.01 and served["p95_run_seconds"] >= 1.0
    assert served["served_by"] == ["h:1:x"]
    one = api.get("/tasks/w.served").json()
    assert one["counts"] == served["counts"] and len(one["recent_jobs"]) == 2
    assert api.get("/tasks/no.such").status_code == 404
    assert api.get("/tasks/bad name").status_code == 422


def test_a_task_is_served_by_the_live_masters_that_declare_it(api, pg_dsn, web_schema):
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {}.workers (owner, host, pid, queues, tasks, concurrency, last_seen)"
            " VALUES ('k:1:x', 'k', 1, '{{default}}', '{{s.both,s.idle}}', 4, now()),"
            " ('j:2:y', 'j', 2, '{{default}}', '{{s.both}}', 4, now()),"
            " ('i:3:z', 'i', 3, '{{default}}', '{{s.both,s.gone}}', 4,"
            "  now() - interval '1 hour'),"
            " ('l:4:w', 'l', 4, '{{default}}', NULL, 4, now())").format(
                sql.Identifier(web_schema)))
    api.post("/jobs", json={"task": "s.both"})
    tasks = {t["task"]: t for t in api.get("/tasks").json()}
    assert tasks["s.both"]["served_by"] == ["j:2:y", "k:1:x"]  # host order; i:3:z is stale
    assert tasks["s.both"]["counts"]["queued"] == 1
    assert tasks["s.idle"]["served_by"] == ["k:1:x"] and tasks["s.idle"]["runs"] == 0
    assert set(tasks["s.idle"]["counts"].values()) == {0}
    assert "s.gone" not in tasks  # only a stale master serves it, and it has no jobs
    one = api.get("/tasks/s.idle").json()
    moving = ("finished_since", "runs_since", "recent_jobs")  # the window's start is now - 1 h
    assert {k: v for k, v in one.items() if k not in moving} == {
        k: v for k, v in tasks["s.idle"].items() if k not in moving}
    assert one["recent_jobs"] == []
    assert api.get("/tasks/s.gone").status_code == 404


def test_stats_match_the_client(api, pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as client:
        expected = [dict(vars(s)) for s in client.stats()]
    got = api.get("/stats").json()
    for row in got + expected:
        row.pop("oldest_queued_age")
    assert got == expected


def test_served_openapi_is_the_code_s(api):
    served = api.get("/openapi.json").json()
    assert served == json.loads(json.dumps(
        create_app(config.Settings(database_url="postgresql://unused@/x")).openapi()))
