"""The database time of one read of the console's events stream, old frame against new.

    PYTHONPATH=. .venv/bin/python benchmarks/events_poll.py --pg-bin /usr/lib/postgresql/15/bin

For each size in --sizes: a fresh schema filled by benchmarks/fill.py (`drain` for sizes up
to 100,000: the middle of a fast drain; `history` above: a queue that has run for an hour),
then --reads reads, alternating, of `jobrun top`'s frame (jobrun.observe.snapshot, what
the stream read before) and of the stream's summary (jobrun.web.summary.StreamSummary, what it
reads now), each on its own connection, a few enqueues and completions between reads so the
summary's ranges are not empty. Prints p50/p95 ms per read and the planner's buffers touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import fill  # noqa: E402
from benchmarks.common import Bench, add_db_args, fmt, percentile, print_table  # noqa: E402
from jobrun import observe  # noqa: E402
from jobrun.sql import for_schema  # noqa: E402
from jobrun.web.summary import StreamSummary  # noqa: E402

MOVE = """
WITH done AS (
    UPDATE {jobs} SET status = 'succeeded', started_at = now(), finished_at = now(),
                      attempts = 1, version = version + 1
     WHERE id IN (SELECT id FROM {jobs} WHERE status = 'queued' AND run_at <= now()
                   ORDER BY id LIMIT %(n)s)
    RETURNING id)
INSERT INTO {jobs} (task, queue, payload) SELECT 'noop', 'default', 'null'
  FROM generate_series(1, %(n)s)
"""


def measure(bench: Bench, size: int, reads: int, move: int) -> list[list]:
    schema = bench.new_schema()
    with bench.connect() as conn:
        (fill.drain if size <= 100_000 else fill.history)(conn, schema, size)
    q = for_schema(schema)
    move_sql = sql.SQL(MOVE).format(jobs=sql.Identifier(schema, "jobs"))
    times: dict[str, list[float]] = {"top frame (before)": [], "stream summary (now)": []}
    summary = StreamSummary()
    with psycopg.connect(bench.dsn, autocommit=True, row_factory=dict_row) as old, \
            psycopg.connect(bench.dsn, autocommit=True, row_factory=dict_row) as new, \
            bench.connect() as writer:
        summary.read(new, q)  # the first read sets the marks
        for i in range(reads):
            writer.execute(move_sql, {"n": move})
            for label, read in (("top frame (before)", lambda: observe.snapshot(old, q)),
                                ("stream summary (now)", lambda: summary.read(new, q)))[::1 if i % 2 else -1]:
                start = time.perf_counter()
                read()
                times[label].append((time.perf_counter() - start) * 1000)
    return [[fmt(size, 0), label, len(t), percentile(t, 50), percentile(t, 95)]
            for label, t in times.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_db_args(parser)
    parser.add_argument("--sizes", default="20000,1000000",
                        help="comma-separated job counts (default 20000,1000000)")
    parser.add_argument("--reads", type=int, default=40)
    parser.add_argument("--move", type=int, default=200,
                        help="jobs completed and enqueued between reads (default 200)")
    args = parser.parse_args()
    rows = []
    with Bench(args) as bench:
        print(bench.describe(), flush=True)
        for size in (int(s) for s in args.sizes.split(",")):
            rows += measure(bench, size, args.reads, args.move)
    print_table(["jobs", "read", "n", "p50 ms", "p95 ms"], rows, digits=2)


if __name__ == "__main__":
    main()
