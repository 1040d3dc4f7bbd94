"""Aging benchmark: what priority aging costs the claim, and what the aging sweeper costs.

    PYTHONPATH=. python benchmarks/aging.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/aging.py --sizes 10000 --seconds 5     # a smoke run

SQL only, no master: the statements a master runs, from jobrun.sql.for_schema, as it runs
them. For each backlog size (default 10k and 1M queued runnable jobs) and each mode (aging
off, aging `--aging`, default 1m), on a fresh schema:

1. Setup, bounded whatever the size and interval: INSERT ... SELECT generate_series in chunks
   of 100,000 rows, priorities uniform over -100..100, runnable since up to `--waited` ago
   (default 1h). With aging on, each row is written as a running sweeper keeps it: at the
   priority it has reached (`base_priority` and `aged_at` set as a sweep sets them), so the
   run starts in the steady state instead of working off a million rows' owed steps. Then
   VACUUM ANALYZE (the state autovacuum reaches after a bulk load).
2. `--seconds` of the hot path on one connection with server-side prepared statements, as
   the master's claimer (prepare_threshold=0): claim `--batch` (statement timed apart from its
   commit), complete them with `complete_jobs` as the master's completer does (they stay in
   the table as succeeded rows), enqueue as many new runnable jobs (untimed: the depth stays).
   With aging on, the master's own sweeper (jobrun.worker.aging.AgingSweeper) runs beside it
   on its own connection on its real schedule, its passes and statements timed. Autovacuum
   runs as in production (the jobs table's own settings, the server's naptime); the runs it
   made are printed.
3. EXPLAIN (ANALYZE, BUFFERS) of one claim (rolled back): its jobs scan, buffers, whether it
   was JIT-compiled (`--explain` prints the whole plan); with aging on, the jobs still owed a
   step at the end (a sweeper that keeps up leaves only those that came due within a pass).

Printed per run and in a closing table: claims made, claim statement median and p99 µs,
sweep passes, a pass's median and p99 ms, its statements and jobs promoted per second,
autovacuum runs on jobs. The claim statement is the same in both modes (docs/queues.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import psycopg
from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import validate  # noqa: E402
from jobrun.sql import for_schema  # noqa: E402
from jobrun.worker.aging import AgingSweeper  # noqa: E402
from jobrun.worker.claimer import claim_params  # noqa: E402

from benchmarks.backlog import OWNER, TTL, complete_params  # noqa: E402
from benchmarks.common import (Bench, add_db_args, describe_code, int_list, machine, median,  # noqa: E402
                               percentile, print_table, run_main)

QUEUE = "aged"
CHUNK = 100_000  # rows per INSERT of the setup


def fill(conn, schema: str, n: int, waited: float, aging: float | None) -> None:
    """n queued jobs, runnable since up to `waited` seconds ago; with aging, each at the
    priority (and with the base_priority and aged_at) a sweeper that kept up wrote."""
    for start in range(0, n, CHUNK):
        conn.execute(sql.SQL(
            "INSERT INTO {} (queue, task, priority, base_priority, aged_at, run_at)"
            " SELECT %(queue)s, 'bench', b - s, CASE WHEN s > 0 THEN b END,"
            "        CASE WHEN s > 0 THEN r + make_interval(secs => s * %(aging)s) END, r"
            "   FROM (SELECT b, r, CASE WHEN %(aging)s::float8 IS NULL THEN 0"
            "                      ELSE least(b + 100, floor(extract(epoch FROM now() - r)"
            "                                                / %(aging)s::float8))::integer"
            "                      END AS s"
            "           FROM (SELECT floor(random() * 201)::integer - 100 AS b,"
            "                        now() - make_interval(secs => random() * %(waited)s) AS r"
            "                   FROM generate_series(1, %(n)s)) g) x").format(
                sql.Identifier(schema, "jobs")),
            {"queue": QUEUE, "aging": aging, "waited": waited, "n": min(CHUNK, n - start)})


def enqueue_sql(schema: str) -> sql.Composed:
    """n new runnable jobs (parameters: queue, n), as a producer enqueues them."""
    return sql.SQL("INSERT INTO {} (queue, task, priority) SELECT %s, 'bench',"
                   " floor(random() * 201)::integer - 100 FROM generate_series(1, %s)").format(
                       sql.Identifier(schema, "jobs"))


class TimedSweeper(AgingSweeper):
    """The master's sweeper, each pass timed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passes: list[float] = []

    async def age(self, conn, queues):
        t = time.perf_counter()
        try:
            return await super().age(conn, queues)
        finally:
            self.passes.append(time.perf_counter() - t)


async def hot_path(dsn: str, schema: str, batch: int, seconds: float) -> tuple[list[float], int]:
    """Claim, complete, enqueue for `seconds`: (claim statement seconds, jobs claimed)."""
    q = for_schema(schema)
    params = claim_params([QUEUE], batch, OWNER, TTL)
    claims, claimed = [], 0
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, prepare_threshold=0)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await conn.execute("BEGIN")
            t = time.perf_counter()
            rows = await (await conn.execute(q.claim_jobs, params)).fetchall()
            claims.append(time.perf_counter() - t)
            await conn.execute("COMMIT")
            pairs = [(r[0], r[1]) for r in rows if r[0] is not None]
            claimed += len(pairs)
            if pairs:
                await conn.execute(q.complete_jobs, complete_params(q.complete_jobs, pairs))
                await conn.execute(enqueue_sql(schema), [QUEUE, len(pairs)])
    finally:
        await conn.close()
    return claims, claimed


async def measure(dsn: str, schema: str, args: argparse.Namespace,
                  aging: float | None) -> tuple[list[float], int, TimedSweeper | None]:
    sweeper = None
    if aging is not None:
        sweeper = TimedSweeper(dsn, for_schema(schema), [QUEUE])
        sweeper.start()
    try:
        claims, claimed = await hot_path(dsn, schema, args.batch, args.seconds)
    finally:
        if sweeper is not None:
            await sweeper.stop()
    return claims, claimed, sweeper


def autovacuums(conn, schema: str) -> int:
    return conn.execute("SELECT autovacuum_count FROM pg_stat_user_tables"
                        " WHERE schemaname = %s AND relname = 'jobs'", [schema]).fetchone()[0]


def explain(conn, q, params: dict[str, Any], full: bool) -> list[str]:
    """The claim's EXPLAIN (ANALYZE, BUFFERS), rolled back: the whole plan, or its jobs scan,
    its buffers, JIT and the times."""
    with conn.transaction(force_rollback=True):
        lines = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + q.claim_jobs,
                                            params).fetchall()]
    if full:
        return lines
    keep, scan = [], False
    for line in lines:
        text = line.strip()
        if " on jobs " in text and "Scan" in text:
            keep.append(text)
            scan = True
        elif scan and text.startswith("Buffers:"):
            keep.append("  " + text)
            scan = False
        elif text.startswith(("JIT:", "Functions:", "Timing:", "Planning Time", "Execution Time")):
            keep.append(text)
    return keep


def owed(conn, schema: str, aging: float) -> int:
    return conn.execute(sql.SQL(
        "SELECT count(*) FROM {} WHERE status = 'queued' AND queue = %s AND priority > -100"
        " AND greatest(aged_at, run_at) <= now() - make_interval(secs => %s)").format(
            sql.Identifier(schema, "jobs")), [QUEUE, aging]).fetchone()[0]


def run(bench: Bench, args: argparse.Namespace, size: int, aging: float | None) -> list[Any]:
    schema = bench.new_schema()
    q = for_schema(schema)
    mode = "off" if aging is None else f"{aging:g}s"
    with bench.connect() as conn:
        conn.execute(sql.SQL("INSERT INTO {} (name, aging) VALUES (%s, make_interval(secs => %s))")
                     .format(sql.Identifier(schema, "queues")), [QUEUE, aging])
        t = time.monotonic()
        fill(conn, schema, size, args.waited, aging)
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "jobs")))
        print(f"\n== {size:,} queued, aging {mode} (set up in {time.monotonic() - t:.1f}s)",
              flush=True)
        vacuums = autovacuums(conn, schema)
        claims, claimed, sweeper = asyncio.run(measure(bench.dsn, schema, args, aging))
        vacuums = autovacuums(conn, schema) - vacuums
        params = claim_params([QUEUE], args.batch, OWNER, TTL)
        plan = explain(conn, q, params, args.explain)
        left = None if aging is None else owed(conn, schema, aging)
    us = [c * 1e6 for c in claims]
    passes = [p * 1e3 for p in sweeper.passes] if sweeper else []
    row = [size, mode, len(claims), median(us), percentile(us, 99),
           len(passes) if sweeper else None, median(passes) if passes else None,
           percentile(passes, 99) if passes else None,
           sweeper.statements if sweeper else None,
           sweeper.aged / args.seconds if sweeper else None, vacuums]
    print(f"  {len(claims)} claims ({claimed:,} jobs): claim {row[3]:.0f} µs median,"
          f" {row[4]:.0f} µs p99; autovacuum ran {vacuums}x on jobs")
    if sweeper:
        print(f"  sweeper: {len(passes)} passes, {row[6] or 0:.1f} ms median, {row[7] or 0:.1f} ms"
              f" p99; {sweeper.statements} statements, {sweeper.aged:,} jobs promoted"
              f" ({row[9]:,.0f}/s); {left:,} owed a step at the end")
    print("  EXPLAIN (ANALYZE, BUFFERS) of one claim:")
    for line in plan:
        print(f"    {line}")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_db_args(parser)
    parser.add_argument("--sizes", type=int_list, default=[10_000, 1_000_000],
                        help="queued backlog sizes, comma-separated (default 10000,1000000)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds of claims (and sweeps) per run (default 20)")
    parser.add_argument("--batch", type=int, default=50, help="jobs per claim (default 50)")
    parser.add_argument("--aging", default="1m", help="the aging interval of the 'on' runs")
    parser.add_argument("--waited", default="1h",
                        help="the backlog is runnable since up to this long ago (default 1h)")
    parser.add_argument("--explain", action="store_true", help="print each claim's whole plan")
    args = parser.parse_args(argv)
    aging = validate.duration(args.aging)
    args.waited = validate.duration(args.waited)
    rows = []
    with Bench(args) as bench:
        print(f"aging benchmark: {bench.describe()}; jobrun {describe_code()}; {machine()}",
              flush=True)
        for size in args.sizes:
            for mode in (None, aging):
                rows.append(run(bench, args, size, mode))
    print()
    print_table(["queued", "aging", "claims", "claim µs median", "claim µs p99", "sweeps",
                 "sweep ms median", "sweep ms p99", "statements", "promoted/s", "autovacuums"],
                rows, digits=1)
    return 0


if __name__ == "__main__":
    run_main(main)
