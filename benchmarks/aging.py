"""Aging benchmark: what priority aging costs the claim, and what a sweep costs.

    PYTHONPATH=. python benchmarks/aging.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/aging.py --sizes 10000 --claims 100     # a smoke run

SQL only, no master: the statements a master runs (`claim_jobs`, and the aging sweeper's
`age_queued`) from jobrun.sql.for_schema, on one connection. For each backlog size (default
10k and 1M queued runnable jobs) and each mode (aging off, aging on), on a fresh schema:

1. One INSERT ... SELECT generate_series fills the queue: priorities spread over -100..100,
   runnable since up to an hour ago (so with aging on, most rows are owed steps). Then
   VACUUM ANALYZE. With aging on (`--aging`, default 1s), sweeps run until none is owed:
   the steady state a running sweeper keeps.
2. `--claims` cycles of "claim `--batch` (one statement, commit), enqueue as many (untimed)";
   with aging on each cycle also runs one sweep (timed apart), as a sweeper would between
   claims. Printed: claim statement median and p99 µs, sweep median µs and jobs promoted per
   sweep, and the claim's EXPLAIN.

The claim statement is the same in both modes; what aging can change is the index the claim
walks (rows spread over more priority levels, dead entries left by promotions).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import validate  # noqa: E402
from jobrun.sql import for_schema  # noqa: E402
from jobrun.worker.claimer import claim_params  # noqa: E402

from benchmarks.common import (Bench, add_db_args, describe_code, int_list, machine, median,  # noqa: E402
                               percentile, print_table, run_main)

QUEUE = "aged"


def fill(conn, schema: str, n: int) -> None:
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, priority, run_at)"
        " SELECT %s, 'bench', (i %% 201) - 100, now() - make_interval(secs => i %% 3600)"
        " FROM generate_series(1, %s) AS i").format(sql.Identifier(schema, "jobs")), [QUEUE, n])


def sweep(conn, q, batch: int = 5000) -> tuple[float, int]:
    """One sweep as the sweeper runs it (statements until one promotes less than a batch):
    (seconds, jobs promoted)."""
    t, total = time.perf_counter(), 0
    while True:
        n = len(conn.execute(q.age_queued, {"queues": [QUEUE], "batch": batch}).fetchall())
        total += n
        if n < batch:
            return time.perf_counter() - t, total


def run(bench: Bench, args: argparse.Namespace, size: int, aging: float | None) -> list[Any]:
    schema = bench.new_schema()
    q = for_schema(schema)
    jobs_t = sql.Identifier(schema, "jobs")
    with bench.connect() as conn:
        conn.execute(sql.SQL("INSERT INTO {} (name, aging) VALUES (%s, make_interval(secs => %s))")
                     .format(sql.Identifier(schema, "queues")), [QUEUE, aging])
        t = time.monotonic()
        fill(conn, schema, size)
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs_t))
        settle = 0
        if aging is not None:
            while (n := sweep(conn, q)[1]):
                settle += n
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(jobs_t))
        print(f"\n== {size:,} queued, aging {'off' if aging is None else f'{aging:g}s'}"
              f" (filled in {time.monotonic() - t:.1f}s; {settle:,} promotions to settle)",
              flush=True)
        params = claim_params([QUEUE], args.batch, "bench", 30)
        claims, sweeps, promoted = [], [], []
        for _ in range(args.claims):
            t0 = time.perf_counter()
            claimed = conn.execute(q.claim_jobs, params).fetchall()
            claims.append((time.perf_counter() - t0) * 1e6)
            conn.execute(sql.SQL("UPDATE {} SET status = 'succeeded', finished_at = now(),"
                                 " lease_owner = NULL WHERE id = ANY(%s)").format(jobs_t),
                         [[r[0] for r in claimed]])
            fill(conn, schema, len(claimed))
            if aging is not None:
                secs, n = sweep(conn, q)
                sweeps.append(secs * 1e6)
                promoted.append(n)
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + q.claim_jobs,
                            params).fetchall()  # (it claims: the schema is dropped next)
    row = [size, "off" if aging is None else f"{aging:g}s", median(claims),
           percentile(claims, 99), median(sweeps) if sweeps else None,
           median(promoted) if promoted else None]
    print(f"  claim {row[2]:.0f} µs median, {row[3]:.0f} µs p99"
          + ("" if aging is None else f"; sweep {row[4]:.0f} µs median, {row[5]:.0f} jobs"
             " promoted per sweep"))
    print("  EXPLAIN (ANALYZE, BUFFERS) of one claim:")
    for line in plan:
        print(f"    {line[0]}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_db_args(parser)
    parser.add_argument("--sizes", type=int_list, default=[10_000, 1_000_000],
                        help="queued backlog sizes, comma-separated (default 10000,1000000)")
    parser.add_argument("--claims", type=int, default=300, help="timed claims per run")
    parser.add_argument("--batch", type=int, default=50, help="jobs per claim")
    parser.add_argument("--aging", default="1s", help="the aging interval of the 'on' runs")
    args = parser.parse_args(argv)
    aging = validate.duration(args.aging)
    rows = []
    with Bench(args) as bench:
        print(f"aging benchmark: {bench.describe()}; jobrun {describe_code()}; {machine()}",
              flush=True)
        for size in args.sizes:
            for mode in (None, aging):
                rows.append(run(bench, args, size, mode))
    print()
    print_table(["queued", "aging", "claim µs median", "claim µs p99", "sweep µs median",
                 "promoted/sweep"], rows, digits=0)
    return 0


if __name__ == "__main__":
    run_main(main)
