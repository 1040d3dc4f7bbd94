"""The figures a real `jobrun web` serves, against straightforward counts of the same rows:
the events stream's summary (depth, rates from what moved between reads, waits, failures),
GET /tasks, and a GET /jobs walk that stops at its bound and says where to continue."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import jobrun
from jobrun.web import reads
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)


class Stream:
    """The events stream read over HTTP, one frame at a time."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(timeout=httpx.Timeout(30.0))
        self.response = self.http.send(self.http.build_request("GET", base + "/api/v1/events"),
                                       stream=True)
        self.lines = self.response.iter_lines()

    def frame(self) -> tuple[str, dict]:
        kind = None
        for line in self.lines:
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind is not None:
                return kind, json.loads(line.removeprefix("data: "))
        raise AssertionError("the stream ended")

    def until(self, check, timeout: float = 30.0) -> dict:
        """The first frame for which ``check`` holds (frames keep coming while rates move)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            kind, last = self.frame()
            if kind in ("snapshot", "summary") and check(last):
                return last
        raise AssertionError(f"no frame matched in {timeout} s; last: {last}")

    def close(self) -> None:
        self.response.close()
        self.http.close()


def run(pg_dsn, schema, text, params=()):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params)
        return cur.fetchall() if cur.description else None


def depth_by_count(pg_dsn, schema):
    rows = run(pg_dsn, schema, """
        SELECT k.name AS queue,
               count(j.id) FILTER (WHERE j.status = 'queued' AND j.run_at <= now()) AS queued,
               count(j.id) FILTER (WHERE j.status = 'queued' AND j.run_at > now()) AS scheduled,
               count(j.id) FILTER (WHERE j.status = 'leased') AS leased
          FROM {s}.queues k LEFT JOIN {s}.jobs j ON j.queue = k.name GROUP BY k.name""")
    return {r["queue"]: (r["queued"], r["scheduled"], r["leased"]) for r in rows}


def depth_of(frame):
    return {q["queue"]: (q["queued"], q["scheduled"], q["leased"]) for q in frame["queues"]}


def sq(frame):
    return next(q for q in frame["queues"] if q["queue"] == "sq")


def test_the_stream_s_figures_match_straightforward_counts(web, pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as client:
        client.declare_queue("sq")
        client.enqueue_many([("s.t", i) for i in range(5)], queue="sq")
        client.enqueue("s.t", "later", queue="sq", delay="1h")
    run(pg_dsn, web_schema, "UPDATE {s}.jobs SET status = 'leased', attempts = 1,"
        " started_at = now(), lease_owner = 'h:1:x', lease_expires_at = now() + interval '30 s',"
        " lease_token = 1 WHERE id = (SELECT min(id) FROM {s}.jobs WHERE queue = 'sq')")
    stream = Stream(web.base)
    try:
        first = stream.until(lambda f: True)
        assert depth_of(first) == depth_by_count(pg_dsn, web_schema)
        assert sq(first)["enqueued_per_s"] is None  # nothing to difference yet

        with jobrun.Client(pg_dsn, schema=web_schema) as client:
            client.enqueue_many([("s.t", i) for i in range(7)], queue="sq")
        # Four queued jobs finish, with waits (start minus enqueue) of 1, 2, 3 and 10 s.
        done = run(pg_dsn, web_schema, """
            UPDATE {s}.jobs j SET status = 'succeeded', attempts = 1, finished_at = now(),
                   started_at = j.created_at + w.wait * interval '1 s'
              FROM (SELECT id, (ARRAY[1, 2, 3, 10])[row_number() OVER (ORDER BY id)] AS wait
                      FROM {s}.jobs WHERE queue = 'sq' AND status = 'queued'
                       AND run_at <= now() ORDER BY id LIMIT 4) w
             WHERE j.id = w.id RETURNING j.id""")
        run(pg_dsn, web_schema, "INSERT INTO {s}.job_attempts (job_id, lease_token, attempt,"
            " started_at, finished_at, outcome, error) VALUES (%s, 7, 1, now(), now(),"
            " 'failed', 'boom')", [done[0]["id"]])

        def moved(f):
            q = sq(f)
            span = f["rate_seconds"] or 0
            return (q["enqueued_per_s"] is not None
                    and round(q["enqueued_per_s"] * span, 6) == 7
                    and round(q["done_per_s"] * span, 6) == 4)

        frame = stream.until(moved)
        assert depth_of(frame) == depth_by_count(pg_dsn, web_schema)
        waits = run(pg_dsn, web_schema, """
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY w) AS p50,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY w) AS p95, count(*) AS n
              FROM (SELECT extract(epoch FROM started_at - greatest(created_at, run_at)) AS w
                      FROM {s}.jobs WHERE queue = 'sq' AND status = 'succeeded') x""")[0]
        q = sq(frame)
        assert (q["wait_p50"], q["wait_p95"], q["wait_sample"]) == pytest.approx(
            (waits["p50"], waits["p95"], waits["n"]))
        assert q["failures"] == 1 and q["oldest_age"] >= 0
    finally:
        stream.close()


def test_tasks_counts_match_straightforward_counts(api, pg_dsn, web_schema):
    expected = {}
    for r in run(pg_dsn, web_schema, """
            SELECT task, status, count(*) AS n FROM {s}.jobs
             WHERE status IN ('queued', 'leased')
                OR finished_at > now() - make_interval(secs => %s)
             GROUP BY task, status""", [reads.TASK_WINDOW]):
        expected.setdefault(r["task"], {s: 0 for s in jobrun.ops.STATUSES})[r["status"]] = r["n"]
    runs = {r["task"]: r for r in run(pg_dsn, web_schema, """
            SELECT j.task, count(*) AS runs, avg(extract(epoch FROM a.finished_at - a.started_at))
                   AS mean FROM {s}.job_attempts a JOIN {s}.jobs j ON j.id = a.job_id
             WHERE a.finished_at > now() - make_interval(secs => %s)
               AND a.outcome IN ('succeeded', 'failed', 'timeout', 'worker_lost', 'lease_expired')
               AND a.started_at IS NOT NULL GROUP BY j.task""", [reads.TASK_WINDOW])}
    got = {t["task"]: t for t in api.get("/tasks").json()}
    assert {name: t["counts"] for name, t in got.items()} == expected
    assert {name: t["runs"] for name, t in got.items() if t["runs"]} == {
        name: r["runs"] for name, r in runs.items()}
    for name, r in runs.items():
        assert got[name]["mean_run_seconds"] == pytest.approx(float(r["mean"]))
        assert got[name]["runs_since"] is not None and got[name]["finished_since"] is not None


def test_a_list_stops_at_its_bound_and_its_cursor_continues(api, pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as client:
        client.declare_queue("rareq")
        rare = [client.enqueue("r.t", i, queue="rareq").job.id for i in range(3)]
    run(pg_dsn, web_schema, "INSERT INTO {s}.jobs (task, queue) SELECT 'r.filler', 'default'"
        " FROM generate_series(1, %s)", [reads.SCAN + 500])
    seen, cursor, pages = [], None, []
    while True:
        body = api.get("/jobs", params={"queue": "rareq", "limit": 2,
                                        **({"cursor": cursor} if cursor else {})}).json()
        pages.append((len(body["jobs"]), body["partial"]))
        seen += [j["id"] for j in body["jobs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(rare, reverse=True)
    # The first request looked at SCAN newer jobs, found none, and said so.
    assert pages[0] == (0, True) and (2, False) in pages and pages[-1][1] is False
