"""HTTP API benchmark: `jobrun web` against the Python client, on the same server, same run.

    PYTHONPATH=. .venv/bin/python benchmarks/api.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. .venv/bin/python benchmarks/api.py --single 500 --total 5000 --rows 50000

Starts a throwaway PostgreSQL with fsync on (or uses --dsn), migrates a fresh schema and
starts a real `jobrun web` subprocess on a free loopback port. Then:

1. Enqueue: --single sequential Client.enqueue calls vs --single sequential POST /jobs over
   one keep-alive connection (jobs/s, p50/p99 ms per call); --total jobs by
   Client.enqueue_many vs POST /jobs/batch, --batch jobs per call (jobs/s).
2. Reads at --rows jobs (bulk-inserted over --tasks tasks, a mix of statuses, with one
   attempt row per finished job, then VACUUM ANALYZE): --reads requests each of GET /jobs
   unfiltered, by status, by task, by queue, and GET /tasks (p50/p99 ms), and the plan of
   the list query filtered by task.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import httpx
from psycopg import sql

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobrun  # noqa: E402
from benchmarks.common import Bench, add_db_args, fmt, percentile, print_table  # noqa: E402
from tests.webproc import WebProcess, web_env  # noqa: E402


def timed(fn, n):
    times = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1000)
    return n / (time.perf_counter() - start), times


def enqueue_rows(args, client, http):
    rows = []
    rate, t = timed(lambda i: client.enqueue("bench.one", {"n": i}), args.single)
    rows.append(["Client.enqueue", args.single, rate, percentile(t, 50), percentile(t, 99)])

    def post(i):
        r = http.post("/jobs", json={"task": "bench.one", "payload": {"n": i}})
        assert r.status_code == 201, r.text

    rate, t = timed(post, args.single)
    rows.append(["POST /jobs", args.single, rate, percentile(t, 50), percentile(t, 99)])
    calls = args.total // args.batch
    rate, t = timed(lambda i: client.enqueue_many(
        [("bench.many", {"n": k}) for k in range(args.batch)]), calls)
    rows.append([f"Client.enqueue_many x{args.batch}", args.total, rate * args.batch,
                 percentile(t, 50), percentile(t, 99)])

    def post_batch(i):
        r = http.post("/jobs/batch", json={"jobs": [{"task": "bench.many", "payload": {"n": k}}
                                                    for k in range(args.batch)]})
        assert r.status_code == 201, r.text

    rate, t = timed(post_batch, calls)
    rows.append([f"POST /jobs/batch x{args.batch}", args.total, rate * args.batch,
                 percentile(t, 50), percentile(t, 99)])
    return rows


def fill(bench, schema, rows, tasks):
    ident = sql.Identifier(schema)
    with bench.connect() as conn:
        conn.execute(sql.SQL(
            "INSERT INTO {s}.jobs (task, queue, payload, status, attempts, started_at,"
            " finished_at) SELECT 'bench.t' || (g %% %s), 'default', '{{}}',"
            " (ARRAY['succeeded','succeeded','succeeded','dead','queued'])[1 + g %% 5],"
            " 1, now() - interval '2 s', CASE WHEN g %% 5 = 4 THEN NULL ELSE now() END"
            " FROM generate_series(1, %s) g").format(s=ident), [tasks, rows])
        conn.execute(sql.SQL(
            "INSERT INTO {s}.job_attempts (job_id, lease_token, attempt, started_at,"
            " finished_at, outcome) SELECT id, 1, 1, started_at, finished_at,"
            " CASE status WHEN 'dead' THEN 'failed' ELSE 'succeeded' END"
            " FROM {s}.jobs WHERE finished_at IS NOT NULL").format(s=ident))
        conn.execute(sql.SQL("VACUUM ANALYZE {s}.jobs").format(s=ident))
        conn.execute(sql.SQL("VACUUM ANALYZE {s}.job_attempts").format(s=ident))


def read_rows(args, http):
    cases = [("GET /jobs", "/jobs", {}), ("GET /jobs?status=dead", "/jobs", {"status": "dead"}),
             ("GET /jobs?task=bench.t7", "/jobs", {"task": "bench.t7"}),
             ("GET /jobs?queue=default", "/jobs", {"queue": "default"}),
             ("GET /tasks", "/tasks", {})]
    out = []
    for label, path, params in cases:
        def get(i, path=path, params=params):
            r = http.get(path, params=params)
            assert r.status_code == 200, r.text
        get(0)  # warm
        _, t = timed(get, args.reads)
        out.append([label, args.reads, percentile(t, 50), percentile(t, 99)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_db_args(parser)
    parser.add_argument("--single", type=int, default=1000)
    parser.add_argument("--total", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rows", type=int, default=200000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    with Bench(args) as bench:
        schema = bench.new_schema()
        server = WebProcess(web_env(bench.dsn, schema)).start()
        try:
            with jobrun.Client(bench.dsn, schema=schema) as client, \
                    httpx.Client(base_url=server.base + "/api/v1", timeout=60) as http:
                print(f"{bench.describe()}; jobrun web on {server.base}")
                print_table(["enqueue", "jobs", "jobs/s", "p50 ms", "p99 ms"],
                            enqueue_rows(args, client, http), digits=2)
                with bench.connect() as conn:
                    conn.execute(sql.SQL("TRUNCATE {}.jobs, {}.job_attempts").format(
                        sql.Identifier(schema), sql.Identifier(schema)))
                fill(bench, schema, args.rows, args.tasks)
                print(f"\nreads at {fmt(args.rows)} jobs over {args.tasks} tasks")
                print_table(["request", "n", "p50 ms", "p99 ms"], read_rows(args, http),
                            digits=2)
                with bench.connect() as conn:
                    plan = conn.execute(
                        "EXPLAIN " + client.queries.web_list_jobs,
                        {"statuses": None, "queue": None, "task": "bench.t7", "q": None,
                         "before": None, "limit": 50}).fetchall()
                print("\nplan of GET /jobs?task=...:\n  " + "\n  ".join(r[0] for r in plan))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
