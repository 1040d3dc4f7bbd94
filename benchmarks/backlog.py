"""Backlog benchmark: does the claim stay cheap with a deep queue and millions of finished rows?

    PYTHONPATH=. python benchmarks/backlog.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/backlog.py --pg-bin /usr/lib/postgresql/15/bin \\
        --finished 200000 --sizes 10000,100000 --cycles 300 --pathology 60000   # quick look

SQL only, no master: the statements the master runs on its hot path (`claim_jobs` and
`complete_jobs` from jobrun.sql.for_schema), driven from one connection.

1. Finished history: `--finished` succeeded rows (default 2,000,000) with one attempt row
   each, inserted by one INSERT ... SELECT generate_series per table, then VACUUM ANALYZE
   (the state autovacuum reaches after a bulk load).
2. For each backlog size (default 10k, 100k, 1M queued runnable jobs): top the queue up to
   that size and VACUUM ANALYZE the jobs table (so each size starts vacuumed, not carrying
   the dead tuples of the sizes before it), then run `--cycles` cycles of "claim 50 (one statement, commit); complete those
   50 with 50 attempt rows (one statement, commit)". After each cycle 50 new jobs are
   enqueued in an untimed transaction, so the backlog stays at its size. Printed: claim ms
   (median, p99), complete ms (median, p99), and jobs/s of the timed claim+complete loop.
   Then EXPLAIN (ANALYZE, BUFFERS) of one claim (rolled back): the buffers it touched.
   DESIGN.md's budget: claim cost within 20 % from 10k to 1M queued.
3. The "600,000 jobs without vacuum" pathology: `--pathology` jobs (default 600,000) queued,
   then the same loop at batch 10 until they are all done, with the table's own autovacuum
   settings; the rate per window of `--window` jobs is printed, start versus end. With
   `--contrast` the same run is repeated with autovacuum disabled on the jobs table (the
   pathology itself, for comparison).

Every figure comes from a throwaway cluster with fsync on (or --dsn); --pg-bin picks the
PostgreSQL binaries (use PostgreSQL 15 for the figures in docs/COMPARE.md).
"""

from __future__ import annotations

import argparse
import re
import socket
import sys
import time
from typing import Any

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun.sql import for_schema  # noqa: E402
from jobrun.worker.claimer import claim_params  # noqa: E402

from benchmarks.common import (run_main, Bench, add_db_args, describe_code, int_list, machine,  # noqa: E402
                               median, percentile, print_table)

OWNER = "backlog-bench:1:0"
TTL = 30.0
REFILL_BATCH = 100_000  # rows per INSERT when topping a queue up


def complete_params(query: str, rows: list[tuple[int, int]]) -> dict[str, Any]:
    """Parameters for `complete_jobs`: every job succeeded. Built from the placeholders the
    statement names, so a column added to the statement later gets NULLs, not a KeyError."""
    n = len(rows)
    known: dict[str, Any] = {
        "ids": [r[0] for r in rows], "tokens": [r[1] for r in rows],
        "statuses": ["succeeded"] * n, "outcomes": ["succeeded"] * n, "delays": [0.0] * n,
        "children": [1] * n, "crashed": [0] * n, "owner": OWNER,
        "host": socket.gethostname(), "pid": 1,
    }
    params: dict[str, Any] = {}
    for name, cast in re.findall(r"%\((\w+)\)[sb](::[\w\[\]]+)?", query):
        if name in known:
            params[name] = known[name]
        elif cast in ("::integer[]", "::bigint[]", "::smallint[]"):
            params[name] = [0] * n
        elif cast == "::float8[]":
            params[name] = [0.0] * n
        elif cast.endswith("[]"):
            params[name] = [None] * n
        else:
            params[name] = None
    return params


class Loop:
    """The SQL-only claim + complete loop on one connection (autocommit: one statement = one
    transaction, as on the master)."""

    def __init__(self, conn, schema: str, batch: int) -> None:
        self.conn = conn
        self.q = for_schema(schema)
        self.schema = schema
        self.batch = batch
        self.claim_params = claim_params(["default"], batch, OWNER, TTL)

    def cycle(self) -> tuple[int, float, float, float, float]:
        """One claim and one complete, each its own transaction. Returns (jobs, claim statement
        seconds, claim commit seconds, complete statement seconds, complete commit seconds):
        the statement and its COMMIT are timed apart, so the statement's own cost (what a
        deep backlog or dead index entries would slow down) is not hidden in the commit's
        WAL flush (fsync on)."""
        conn = self.conn
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        rows = conn.execute(self.q.claim_jobs, self.claim_params).fetchall()
        t1 = time.perf_counter()
        conn.execute("COMMIT")
        t2 = time.perf_counter()
        if not rows:
            return 0, t1 - t0, t2 - t1, 0.0, 0.0
        pairs = [(r[0], r[1]) for r in rows]
        conn.execute("BEGIN")
        done = conn.execute(self.q.complete_jobs,
                            complete_params(self.q.complete_jobs, pairs)).fetchall()
        t3 = time.perf_counter()
        conn.execute("COMMIT")
        t4 = time.perf_counter()
        if len(done) != len(pairs):
            raise RuntimeError(f"complete_jobs accepted {len(done)} of {len(pairs)} jobs")
        return len(rows), t1 - t0, t2 - t1, t3 - t2, t4 - t3


def insert_finished(conn, schema: str, n: int, attempts: bool) -> float:
    jobs = sql.Identifier(schema, "jobs")
    started = time.monotonic()
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, payload, status, attempts, lease_token, created_at,"
        "                started_at, finished_at)"
        " SELECT 'default', 'noop', 'null', 'succeeded', 1, 1,"
        "        now() - interval '2 days' + g * interval '1 ms',"
        "        now() - interval '2 days' + g * interval '1 ms',"
        "        now() - interval '2 days' + g * interval '1 ms' + interval '2 ms'"
        "   FROM generate_series(1, %s) g").format(jobs), [n])
    if attempts:
        conn.execute(sql.SQL(
            "INSERT INTO {} (job_id, lease_token, attempt, worker_host, worker_pid, worker_child,"
            "                started_at, finished_at, outcome)"
            " SELECT id, 1, 1, 'bench', 1, 1, started_at, finished_at, 'succeeded'"
            "   FROM {} WHERE status = 'succeeded'").format(
                sql.Identifier(schema, "job_attempts"), jobs))
    return time.monotonic() - started


def top_up(conn, schema: str, target: int) -> int:
    """Insert queued runnable jobs until `target` are queued; returns how many were added.
    Their run_at is in the past (as a backlog's would be), after every job already there."""
    jobs = sql.Identifier(schema, "jobs")
    have = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE status = 'queued'").format(jobs)
                        ).fetchone()[0]
    left = target - have
    added = 0
    while left > 0:
        n = min(left, REFILL_BATCH)
        conn.execute(sql.SQL(
            "INSERT INTO {} (queue, task, payload, run_at)"
            " SELECT 'default', 'noop', 'null', now() - interval '1 hour' FROM generate_series(1, %s)"
        ).format(jobs), [n])
        left -= n
        added += n
    return added


def refill(conn, schema: str, n: int) -> None:
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, payload) SELECT 'default', 'noop', 'null'"
        "  FROM generate_series(1, %s)").format(sql.Identifier(schema, "jobs")), [n])


def table_state(conn, schema: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count, vacuum_count,"
        "       pg_total_relation_size(relid), pg_relation_size(%s::regclass)"
        "  FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'jobs'",
        [f'"{schema}".jobs_claim', schema]).fetchone()
    return {"live": row[0], "dead": row[1], "autovacuums": row[2], "vacuums": row[3],
            "total_mb": row[4] / 2**20, "claim_index_mb": row[5] / 2**20}


def explain_claim(conn, schema: str, batch: int) -> list[str]:
    q = for_schema(schema)
    params = claim_params(["default"], batch, OWNER, TTL)
    with conn.transaction(force_rollback=True):
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY ON) " + q.claim_jobs,
                            params).fetchall()
    return [r[0] for r in rows]


def claim_buffers(plan: list[str]) -> str:
    """The top node's buffer counts (the whole statement's)."""
    for line in plan:
        if "Buffers:" in line:
            return line.split("Buffers:", 1)[1].strip()
    return "?"


def run_sizes(bench: Bench, args: argparse.Namespace, schema: str) -> list[list[Any]]:
    results = []
    with bench.connect() as conn:
        loop = Loop(conn, schema, args.batch)
        for size in args.sizes:
            t = time.monotonic()
            added = top_up(conn, schema, size)
            # Every size starts from the same state, vacuumed: what the earlier sizes' cycles
            # left dead would otherwise be charged to the later (deeper) ones. Dead tuples
            # piling up within a run are what the pathology run (below) and soak.py measure.
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "jobs")))
            print(f"\n== {size:,} queued (+{added:,} inserted in {time.monotonic() - t:.1f}s)",
                  flush=True)
            for _ in range(args.warmup):
                loop.cycle()
                refill(conn, schema, args.batch)
            claims, claim_txn, completes, commits, jobs = [], [], [], [], 0
            for _ in range(args.cycles):
                n, c, cc, d, dc = loop.cycle()
                claims.append(c * 1000)
                claim_txn.append((c + cc) * 1000)
                completes.append((d + dc) * 1000)
                commits.extend([cc * 1000, dc * 1000])
                jobs += n
                refill(conn, schema, n)
            busy = (sum(claim_txn) + sum(completes)) / 1000
            state = table_state(conn, schema)
            plan = explain_claim(conn, schema, args.batch)
            row = [size, median(claims), percentile(claims, 99), median(claim_txn),
                   percentile(claim_txn, 99), median(completes), percentile(completes, 99),
                   median(commits), jobs / busy, claim_buffers(plan)]
            results.append(row)
            print(f"  claim statement {row[1]:.3f} ms median, {row[2]:.3f} ms p99; claim with its"
                  f" commit {row[3]:.3f} / {row[4]:.3f} ms; complete with its commit {row[5]:.3f} /"
                  f" {row[6]:.3f} ms; a COMMIT alone {row[7]:.3f} ms median; {row[8]:,.0f} jobs/s of"
                  f" claim+complete ({jobs:,} jobs in {args.cycles} cycles of {args.batch})")
            print(f"  jobs table: {state['live']:,} live, {state['dead']:,} dead tuples,"
                  f" {state['autovacuums']} autovacuums so far, {state['total_mb']:.0f} MiB with"
                  f" indexes, claim index {state['claim_index_mb']:.1f} MiB")
            print("  EXPLAIN (ANALYZE, BUFFERS) of one claim:")
            for line in plan:
                print(f"    {line}")
            sys.stdout.flush()
    return results


def run_pathology(bench: Bench, args: argparse.Namespace, schema: str, autovacuum: bool) -> dict[str, Any]:
    jobs_t = sql.Identifier(schema, "jobs")
    with bench.connect() as conn:
        # Start from an empty queue: finish what the backlog runs left queued.
        conn.execute(sql.SQL("UPDATE {} SET status = 'cancelled', finished_at = now()"
                             " WHERE status IN ('queued', 'leased')").format(jobs_t))
        if not autovacuum:
            conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)").format(jobs_t))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs_t))
        t = time.monotonic()
        top_up(conn, schema, args.pathology)
        print(f"\n== pathology: {args.pathology:,} jobs queued in {time.monotonic() - t:.1f}s;"
              f" loop at batch {args.pathology_batch} until all done; autovacuum"
              f" {'ON (the table settings of migration 0001)' if autovacuum else 'OFF for this run'}",
              flush=True)
        before = table_state(conn, schema)
        loop = Loop(conn, schema, args.pathology_batch)
        windows = []  # (jobs done so far, window jobs/s, claim median ms, claim p99 ms, dead)
        done = 0
        w_jobs, w_claims, w_start = 0, [], time.perf_counter()
        started = w_start
        while True:
            n, c, _, _, _ = loop.cycle()
            if n == 0:
                break
            done += n
            w_jobs += n
            w_claims.append(c * 1000)
            if w_jobs >= args.window:
                now = time.perf_counter()
                dead = table_state(conn, schema)["dead"]
                windows.append((done, w_jobs / (now - w_start), median(w_claims),
                                percentile(w_claims, 99), dead))
                print(f"  {done:>9,} done: {windows[-1][1]:8,.0f} jobs/s, claim"
                      f" {windows[-1][2]:.3f} ms median {windows[-1][3]:.3f} ms p99,"
                      f" {dead:,} dead tuples", flush=True)
                w_jobs, w_claims, w_start = 0, [], time.perf_counter()
        total_s = time.perf_counter() - started
        after = table_state(conn, schema)
        if not autovacuum:
            conn.execute(sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled)").format(jobs_t))
    first, last = windows[0], windows[-1] if len(windows) > 1 else windows[0]
    result = {"autovacuum": autovacuum, "jobs": done, "seconds": total_s, "start_rate": first[1],
              "end_rate": last[1], "start_claim": first[2], "end_claim": last[2],
              "min_rate": min(w[1] for w in windows), "autovacuums": after["autovacuums"] - before["autovacuums"],
              "max_dead": max(w[4] for w in windows)}
    print(f"  {done:,} jobs in {total_s:.1f}s ({done / total_s:,.0f} jobs/s overall); first window"
          f" {first[1]:,.0f} jobs/s, last window {last[1]:,.0f} jobs/s"
          f" ({last[1] / first[1] * 100:.0f} %), slowest window {result['min_rate']:,.0f} jobs/s;"
          f" {result['autovacuums']} autovacuums of jobs during the run, at most"
          f" {result['max_dead']:,} dead tuples seen", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--finished", type=int, default=2_000_000,
                        help="succeeded jobs kept in the table (default 2,000,000)")
    parser.add_argument("--no-attempts", action="store_true",
                        help="do not insert an attempt row per finished job")
    parser.add_argument("--sizes", type=int_list, default=[10_000, 100_000, 1_000_000],
                        help="queued backlog sizes (default 10000,100000,1000000)")
    parser.add_argument("--batch", type=int, default=50, help="claim limit (default 50)")
    parser.add_argument("--cycles", type=int, default=600, help="measured cycles per size (default 600)")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured cycles first (default 50)")
    parser.add_argument("--pathology", type=int, default=600_000,
                        help="jobs through the batch-10 loop (default 600,000; 0 = skip)")
    parser.add_argument("--pathology-batch", type=int, default=10)
    parser.add_argument("--window", type=int, default=50_000, help="jobs per printed window")
    parser.add_argument("--contrast", action="store_true",
                        help="repeat the pathology run with autovacuum off on the jobs table")
    add_db_args(parser)
    args = parser.parse_args(argv)

    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"backlog: {args.finished:,} finished jobs kept; queued backlogs"
              f" {', '.join(f'{s:,}' for s in args.sizes)}; claim limit {args.batch}")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}", flush=True)
        schema = bench.new_schema()
        with bench.connect() as conn:
            secs = insert_finished(conn, schema, args.finished, not args.no_attempts)
            t = time.monotonic()
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "jobs")))
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "job_attempts")))
            state = table_state(conn, schema)
        print(f"  {args.finished:,} finished jobs{'' if args.no_attempts else ' + attempts'} inserted"
              f" in {secs:.1f}s, vacuumed in {time.monotonic() - t:.1f}s; jobs table"
              f" {state['total_mb']:.0f} MiB with indexes", flush=True)
        results = run_sizes(bench, args, schema)
        print(f"\nclaim cost by backlog ({args.cycles} cycles of claim {args.batch} + complete each;"
              f" {args.finished:,} finished rows kept):")
        print_table(["queued", "claim stmt p50", "claim stmt p99", "claim+commit p50",
                     "claim+commit p99", "complete+commit p50", "complete+commit p99",
                     "commit p50", "jobs/s", "claim buffers"], results, digits=3)
        print("(ms; `claim stmt` is the claim statement alone, before its COMMIT)")
        if len(results) > 1:
            base = results[0][1]
            worst = max(r[1] for r in results)
            print(f"claim statement median, largest backlog vs smallest: {results[-1][1] / base:.2f}x;"
                  f" worst vs smallest {worst / base:.2f}x (budget: within 1.20x); claim with"
                  f" commit: {results[-1][3] / results[0][3]:.2f}x")
        patho = []
        if args.pathology:
            patho.append(run_pathology(bench, args, schema, autovacuum=True))
            if args.contrast:
                patho.append(run_pathology(bench, args, schema, autovacuum=False))
            print(f"\npathology runs ({args.pathology:,} jobs through claim {args.pathology_batch}"
                  f" + complete, windows of {args.window:,} jobs):")
            print_table(["autovacuum", "start jobs/s", "end jobs/s", "end/start", "slowest",
                         "claim ms start", "claim ms end", "autovacuums", "max dead"],
                        [["on" if r["autovacuum"] else "off", r["start_rate"], r["end_rate"],
                          r["end_rate"] / r["start_rate"], r["min_rate"], r["start_claim"],
                          r["end_claim"], r["autovacuums"], r["max_dead"]] for r in patho], digits=3)
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
