"""Limits benchmark: what a claim that enforces limits costs a noop drain.

    PYTHONPATH=. python benchmarks/limits.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/limits.py --jobs 2000 --repeat 1 --concurrency 2   # smoke

Side by side in one run, alternating the modes within each round so drift on the machine
falls on all of them alike, the same drain as benchmarks/drain.py (N noop jobs enqueued while
no master runs, then `jobrun-master -c C` empties the queue) with:

- none: the queue without limits (the claim takes no lock, reads no limit row);
- concurrency: a cluster-wide limit that never binds (--generous, default C x prefetch x 2:
  above what the master can hold leased with its default --prefetch per child), so every
  claim locks the queue's claim row and every completion adds to its release row;
- rate: a rate limit that never binds (10,000,000 per second), so every claim also keeps the
  sliding window;
- aging: the queue ages by a step a minute: the sweeper runs its passes, and no job of a
  drain this short is owed a step;
- aging_1s: a step a second: every job still waiting is promoted once a second while the
  drain runs (the sweeper's writes at their busiest).

Printed: wall jobs/s per run and mode, then per mode the median and its ratio to none.
The goal (docs/dispatch.md): a generous limit within 10 % of none.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

import psycopg
from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (run_main, Bench, add_db_args, describe_code, int_list, machine,  # noqa: E402
                               median, print_table)
from benchmarks.drain import run_once  # noqa: E402
from jobrun.config import Settings  # noqa: E402

MODES = ("none", "concurrency", "rate", "aging", "aging_1s")


def settings_for(mode: str, concurrency: int, generous: int | None) -> dict[str, Any]:
    if mode == "concurrency":
        return {"concurrency": generous or concurrency * Settings.prefetch * 2}
    if mode == "rate":
        return {"rate_limit": 10_000_000, "rate_period": "1 second"}
    if mode == "aging":
        return {"aging": "1 minute"}
    if mode == "aging_1s":
        return {"aging": "1 second"}
    return {}


def preparer(dsn: str, values: dict[str, Any]) -> Callable[[str], None] | None:
    if not values:
        return None

    def prepare(schema: str) -> None:
        sets = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v))
                                  for k, v in values.items())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("UPDATE {} SET {}, version = version + 1 WHERE name = 'default'")
                         .format(sql.Identifier(schema, "queues"), sets))

    return prepare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per run (default 20000)")
    parser.add_argument("--concurrency", type=int_list, default=[4],
                        help="comma-separated -c values (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of all modes (default 3)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of {', '.join(MODES)} (default all)")
    parser.add_argument("--generous", type=int, default=None,
                        help="the cluster-wide limit of the concurrency mode (default C x prefetch x 2)")
    parser.add_argument("--timeout", type=float, default=900.0)
    add_db_args(parser)
    args = parser.parse_args(argv)
    # What benchmarks/drain.py's run_once reads besides these options: one master, noop jobs.
    args.task, args.cpu_ms, args.masters = "noop", 0.0, 1
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: of {', '.join(MODES)}")
    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"limits: {args.jobs:,} noop jobs per run, -c {','.join(map(str, args.concurrency))},"
              f" modes {', '.join(modes)}, {args.repeat} rounds")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}", flush=True)
        results: dict[tuple[int, str], list[float]] = {}
        for c in args.concurrency:
            for r in range(args.repeat):
                for mode in modes:
                    values = settings_for(mode, c, args.generous)
                    res = run_once(bench, args, c, None, preparer(bench.dsn, values))
                    res.pop("report")
                    results.setdefault((c, mode), []).append(res["wall_rate"])
                    print(f"  -c {c:<3} round {r + 1} {mode:<12} {res['wall_rate']:8,.0f} jobs/s"
                          f" ({res['wall_s']:.2f}s) {values or ''}", flush=True)
                    if res["attempts"] != args.jobs or res["not_ok"]:
                        print(f"    ! {res['attempts']} attempts for {args.jobs} jobs,"
                              f" {res['not_ok']} not succeeded", flush=True)
        print()
        rows = []
        for (c, mode), rates in results.items():
            base = median(results.get((c, "none"), [float("nan")]))
            rows.append([c, mode, median(rates), median(rates) / base, min(rates), max(rates)])
        print_table(["-c", "mode", "wall jobs/s", "vs none", "min", "max"], rows, digits=2)
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
