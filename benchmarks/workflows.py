"""Workflow benchmark: a fan-in's callback latency and drain, and a long chain's step time.

    PYTHONPATH=. python benchmarks/workflows.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/workflows.py --fan-in 10000 --chain 1000 --repeat 5 -c 4

Fan-in: a fresh schema; a chord of --fan-in noop jobs and a noop callback enqueued while no
master runs; then one `jobrun-master -c C` drains it. Reported per run, from the database's
timestamps: the drain rate of the parents (N / (last parent's finish - first start)), and
the callback's start latency (its claim time minus the last parent attempt's finish time:
both the database clock, the finish taken at its completion's transaction start, so the
figure includes that commit). The same N plain noop jobs drained by the same master give
the plain rate the fan-in's is compared with. Chain: --chain noop steps, each after the one
before; a step's time is the time between consecutive steps' starts (median and p95).
"""

from __future__ import annotations

import argparse
import sys
import time

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import Client, workflows as wf  # noqa: E402

from benchmarks.common import (Bench, add_db_args, median, percentile, print_table,  # noqa: E402
                               run_main)


def drained(bench: Bench, schema: str, concurrency: int, n: int, timeout: float) -> None:
    """Start a master on ``schema`` and wait until no job is waiting, queued or leased."""
    master = bench.start_master(schema, concurrency)
    busy = sql.SQL("SELECT EXISTS (SELECT FROM {0} WHERE status IN ('waiting', 'queued',"
                   " 'leased'))").format(sql.Identifier(schema, "jobs"))
    try:
        ready = master.wait_ready(timeout=120)
        with bench.connect() as conn:
            while conn.execute(busy).fetchone()[0]:
                if time.monotonic() > ready + timeout:
                    raise RuntimeError(f"the {n} jobs were not done after {timeout:g}s")
                if not master.running():
                    raise RuntimeError("jobrun-master exited early")
                time.sleep(0.05)
    finally:
        bench.stop_master(master)


def span_rate(bench: Bench, schema: str, ids: list[int] | None) -> float:
    with bench.connect() as conn:
        [(span, n)] = conn.execute(sql.SQL(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8, count(*)"
            "  FROM {} WHERE %s::bigint[] IS NULL OR job_id = ANY(%s::bigint[])").format(
                sql.Identifier(schema, "job_attempts")), [ids, ids]).fetchall()
    return n / span


def fan_in(bench: Bench, args: argparse.Namespace) -> dict:
    plain = bench.new_schema()
    with Client(bench.dsn, schema=plain) as client:
        for at in range(0, args.fan_in, 5000):
            client.enqueue_many([("noop", None)] * min(5000, args.fan_in - at))
    drained(bench, plain, args.concurrency, args.fan_in, args.timeout)
    plain_rate = span_rate(bench, plain, None)
    schema = bench.new_schema()  # (the plain one is dropped)
    with Client(bench.dsn, schema=schema) as client:
        made = client.enqueue_workflow(
            wf.chord(wf.group(*[wf.Step("noop") for _ in range(args.fan_in)]), wf.Step("noop")))
    drained(bench, schema, args.concurrency, args.fan_in + 1, args.timeout)
    *parents, callback = made.job_ids
    with bench.connect() as conn:
        [(latency,)] = conn.execute(sql.SQL(
            "SELECT extract(epoch FROM (SELECT started_at FROM {a} WHERE job_id = %s)"
            "  - (SELECT max(finished_at) FROM {a} WHERE job_id <> %s))::float8").format(
                a=sql.Identifier(schema, "job_attempts")), [callback, callback]).fetchall()
    return {"plain_rate": plain_rate,
            "fan_in_rate": span_rate(bench, schema, parents), "latency_ms": latency * 1000}


def chain(bench: Bench, args: argparse.Namespace) -> list[float]:
    schema = bench.new_schema()
    with Client(bench.dsn, schema=schema) as client:
        made = client.enqueue_workflow(wf.chain(*[wf.Step("noop") for _ in range(args.chain)]))
    drained(bench, schema, args.concurrency, args.chain, args.timeout)
    with bench.connect() as conn:
        starts = [r[0] for r in conn.execute(sql.SQL(
            "SELECT started_at FROM {} ORDER BY job_id").format(
                sql.Identifier(schema, "job_attempts"))).fetchall()]
    assert len(starts) == len(made.job_ids)
    return [(b - a).total_seconds() * 1000 for a, b in zip(starts, starts[1:])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_db_args(parser)
    parser.add_argument("--fan-in", type=int, default=10000, help="parents of the callback")
    parser.add_argument("--chain", type=int, default=1000, help="steps of the chain")
    parser.add_argument("-c", "--concurrency", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    with Bench(args) as bench:
        print(bench.describe())
        runs = [fan_in(bench, args) for _ in range(args.repeat)]
        print_table(["run", "plain jobs/s", "fan-in jobs/s", "ratio", "callback ms"],
                    [[i + 1, r["plain_rate"], r["fan_in_rate"], r["fan_in_rate"] / r["plain_rate"],
                      r["latency_ms"]] for i, r in enumerate(runs)], digits=2)
        latencies = [r["latency_ms"] for r in runs]
        print(f"callback latency: max {max(latencies):.1f} ms over {len(runs)} runs;"
              f" drain ratio median {median([r['fan_in_rate'] / r['plain_rate'] for r in runs]):.2f}")
        steps = chain(bench, args)
        print(f"chain of {args.chain}: a step {median(steps):.2f} ms (median),"
              f" {percentile(steps, 95):.2f} ms (p95)")
    return 0


if __name__ == "__main__":
    run_main(main)
