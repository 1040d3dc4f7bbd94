"""HTTP API benchmark: `jobrun web` against the Python client, on the same server, same run.

    PYTHONPATH=. .venv/bin/python benchmarks/api.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. .venv/bin/python benchmarks/api.py --single 200 --total 2000   # quick look

Starts a throwaway PostgreSQL with fsync on (or uses --dsn), migrates a fresh schema and
starts a real `jobrun web` subprocess on a free loopback port. Then:

1. Enqueue: --single sequential Client.enqueue calls vs --single sequential POST /jobs over
   one keep-alive connection (jobs/s, p50/p99 ms per call); --total jobs by
   Client.enqueue_many vs POST /jobs/batch, --batch jobs per call (jobs/s).

The read side (GET latency at a million jobs) is benchmarks/api_reads.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import httpx
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jobrun  # noqa: E402
from benchmarks.common import Bench, add_db_args, percentile, print_table  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_db_args(parser)
    parser.add_argument("--single", type=int, default=1000)
    parser.add_argument("--total", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=500)
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
        finally:
            server.stop()


if __name__ == "__main__":
    main()
