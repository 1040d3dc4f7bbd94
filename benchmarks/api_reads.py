"""GET latency of the HTTP API at a large table: every list filter, /tasks and the other reads.

    PYTHONPATH=. .venv/bin/python benchmarks/api_reads.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. .venv/bin/python benchmarks/api_reads.py --rows 100000 --reads 20   # quick look

Starts a throwaway PostgreSQL with fsync on (or uses --dsn), fills a fresh schema with --rows
jobs (benchmarks/fill.py `history`: an hour of a queue's life, a mix of statuses, tasks and
queues with rare ones, attempt rows, VACUUM ANALYZE), starts a real `jobrun web` subprocess
and sends --reads requests per case over one keep-alive connection. Prints per case p50 and
p99 ms, the rows of the first answer and whether it was partial (the list stopped after
looking at its bound of jobs, with a cursor to continue). GET /healthz (one `SELECT now()`)
shows what a request costs without the reads on this machine at this moment.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import fill  # noqa: E402
from benchmarks.common import Bench, add_db_args, fmt, percentile, print_table  # noqa: E402
from tests.webproc import WebProcess, web_env  # noqa: E402


def cases(rows: int) -> list[tuple[str, dict]]:
    middle = str(rows // 2)
    jobs = [
        {}, {"status": "queued"}, {"status": "leased"}, {"status": "succeeded"},
        {"status": "dead"}, {"status": "cancelled"}, {"status": ["dead", "cancelled"]},
        {"queue": "default"}, {"queue": "rare"}, {"queue": "rare", "status": "dead"},
        {"task": "bench.t7"}, {"task": "bench.rare"}, {"task": "bench.t7", "status": "dead"},
        {"task": "bench.rare", "queue": "rare"}, {"schedule": "bench.nightly"},
        {"schedule": "bench.nightly", "status": "queued"}, {"q": "key-99"},
        {"cursor": middle}, {"cursor": middle, "status": "dead"},
        {"cursor": middle, "task": "bench.t7", "queue": "emails"},
    ]
    return ([("/healthz", {})] + [("/jobs", p) for p in jobs] + [
        ("/tasks", {}), ("/tasks/bench.t7", {}), ("/attempts", {}),
        ("/attempts", {"outcome": "failed"}), ("/workers", {}), ("/queues", {}), ("/stats", {})])


def label(path: str, params: dict) -> str:
    parts = [f"{k}={v}" for k, vs in params.items() for v in (vs if isinstance(vs, list) else [vs])]
    return "GET " + path + ("?" + "&".join(parts) if parts else "")


def measure(http: httpx.Client, path: str, params: dict, n: int) -> list:
    first = http.get(path, params=params)
    assert first.status_code == 200, first.text
    body = first.json()
    found = len(body["jobs"]) if path == "/jobs" else (
        len(body["attempts"]) if path == "/attempts" else len(body) if isinstance(body, list) else 1)
    partial = body.get("partial") if isinstance(body, dict) else None
    times = []
    for _ in range(n):
        start = time.perf_counter()
        r = http.get(path, params=params)
        times.append((time.perf_counter() - start) * 1000)
        assert r.status_code == 200, r.text
    return [label(path, params), n, found, "partial" if partial else "",
            percentile(times, 50), percentile(times, 99)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_db_args(parser)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--reads", type=int, default=200, help="requests per case (default 200)")
    parser.add_argument("--only", default="", help="only cases whose label contains this text")
    args = parser.parse_args()
    with Bench(args) as bench:
        schema = bench.new_schema()
        start = time.monotonic()
        with bench.connect() as conn:
            fill.history(conn, schema, args.rows, args.tasks)
        print(f"{bench.describe()}; {fmt(args.rows, 0)} jobs filled in"
              f" {time.monotonic() - start:.0f} s", flush=True)
        server = WebProcess(web_env(bench.dsn, schema)).start()
        try:
            with httpx.Client(base_url=server.base + "/api/v1", timeout=60) as http:
                rows = [measure(http, path, params, args.reads)
                        for path, params in cases(args.rows) if args.only in label(path, params)]
        finally:
            server.stop()
    print_table(["request", "n", "rows", "", "p50 ms", "p99 ms"], rows, digits=1)


if __name__ == "__main__":
    main()
