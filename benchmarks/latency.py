"""Latency benchmark: pick-up and finish latency under a fixed, open-loop arrival rate.

    PYTHONPATH=. python benchmarks/latency.py --pg-bin /usr/lib/postgresql/15/bin --rate 200
    PYTHONPATH=. python benchmarks/latency.py --pg-bin /usr/lib/postgresql/15/bin --rate 1000
    PYTHONPATH=. python benchmarks/latency.py --pg-bin /usr/lib/postgresql/15/bin --rate 1000 \
        --task echo --payload-bytes 65536 --log-lines 3

A master (`-c 4` by default) runs on a fresh schema; once its children are idle, an open-loop
producer enqueues job i at t0 + i/rate on the monotonic clock, each with its own
Client.enqueue (its own transaction). It never waits for the queue: a tick it reaches more
than one interval late is skipped and counted, not queued up, so a slow system cannot slow
the arrivals down. Afterwards, from database timestamps:
enqueue-to-start = job_attempts.started_at - jobs.created_at,
enqueue-to-finish = job_attempts.finished_at - jobs.created_at.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any, Callable

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import Client  # noqa: E402

from benchmarks.common import (run_main, Bench, MasterProc, add_db_args, cores_used, cpu_seconds, describe_code,  # noqa: E402
                               machine, median, percentile, print_table, wait_quiet)


class Producer(threading.Thread):
    """Issues ticks p, p+P, p+2P, ... of the global schedule t0 + i/rate (P producers)."""

    def __init__(self, dsn: str, schema: str, index: int, producers: int, rate: float,
                 total: int, task: str, payload: Any) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.client = Client(dsn, schema=schema)
        self.index = index
        self.producers = producers
        self.rate = rate
        self.total = total
        self.task = task
        self.payload = payload
        self.t0 = 0.0
        self.go = threading.Event()
        self.stop_now = threading.Event()
        self.sent = 0
        self.skipped = 0
        self.send_lag: list[float] = []  # seconds late at issue
        self.call: list[float] = []  # seconds per enqueue call (round trip + commit)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            # One warm-up job opens the connection; it is left out of the figures.
            self.client.enqueue(self.task, self.payload)
            self.go.wait()
            self._loop()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.client.close()

    def _loop(self) -> None:
        step = self.producers / self.rate  # this producer's own interval
        i = self.index
        while i < self.total and not self.stop_now.is_set():
            target = self.t0 + i / self.rate
            now = time.monotonic()
            if now < target:
                time.sleep(target - now)
                now = time.monotonic()
            elif now - target >= step:
                # Behind by whole intervals: those ticks are lost, not queued up.
                missed = int((now - target) / step)
                missed = min(missed, (self.total - 1 - i) // self.producers + 1)
                self.skipped += missed
                i += missed * self.producers
                continue
            self.send_lag.append(now - target)
            began = time.monotonic()
            self.client.enqueue(self.task, self.payload)
            self.call.append(time.monotonic() - began)
            self.sent += 1
            i += self.producers


def sample_depth(bench: Bench, schema: str, stop: threading.Event, out: list[tuple[float, int, int]],
                 t0: float) -> None:
    query = sql.SQL("SELECT (SELECT count(*) FROM {jobs} WHERE status = 'queued'),"
                    " (SELECT count(*) FROM {jobs} WHERE status = 'leased')").format(
        jobs=sql.Identifier(schema, "jobs"))
    with bench.connect() as conn:
        k = 1
        while not stop.wait(max(0.0, t0 + k - time.monotonic())):
            queued, leased = conn.execute(query).fetchone()
            out.append((time.monotonic() - t0, queued, leased))
            k += 1


PCTS = (50, 95, 99)


def run_once(bench: Bench, args: argparse.Namespace, total: int, payload: Any,
             start: Callable[[str], list[MasterProc]] | None = None) -> dict[str, Any]:
    """One run on a fresh schema and a fresh master (or what ``start(schema)`` starts instead,
    processes with a MasterProc's interface: benchmarks/remote_drain.py); prints its details,
    returns its figures."""
    schema = bench.new_schema()
    masters = start(schema) if start is not None else [bench.start_master(schema, args.concurrency)]
    master = masters[0]
    running = lambda: all(m.running() for m in masters)  # noqa: E731
    producers = [Producer(bench.dsn, schema, p, args.producers, args.rate, total, args.task,
                          payload) for p in range(args.producers)]
    jobs = sql.Identifier(schema, "jobs")
    depth: list[tuple[float, int, int]] = []
    stop_sampler = threading.Event()
    sampler = None
    try:
        for m in masters:
            m.wait_ready(timeout=120)
            m.wait_children_idle(timeout=120)
        wait_quiet(args.quiet_below, args.patience)
        for p in producers:
            p.start()
        # The producers' warm-up jobs: wait for them to be done before the clock starts.
        with bench.connect() as conn:
            while conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE status = 'succeeded'")
                               .format(jobs)).fetchone()[0] < len(producers):
                if any(p.error for p in producers) or not running():
                    break
                time.sleep(0.02)
            warm_ids = [r[0] for r in conn.execute(sql.SQL("SELECT id FROM {}").format(jobs))]
        bench.pgss_reset()
        postmaster = bench.postmaster_pid()
        cpu_before = cpu_seconds([m.pid for m in masters], postmaster)
        cpu_mark = time.monotonic()
        t0 = time.monotonic() + 0.2
        sampler = threading.Thread(target=sample_depth, daemon=True,
                                   args=(bench, schema, stop_sampler, depth, t0))
        sampler.start()
        for p in producers:
            p.t0 = t0
            p.go.set()
        for p in producers:
            while p.is_alive():
                p.join(0.5)
                if not running():
                    raise RuntimeError("jobrun-master exited during the run")
        ended = time.monotonic()
        cpu_after = cpu_seconds([m.pid for m in masters], postmaster)
        errors = [p.error for p in producers if p.error]
        if errors:
            raise RuntimeError(f"a producer failed: {errors[0]!r}")
        sent = sum(p.sent for p in producers)
        with bench.connect() as conn:
            deadline = time.monotonic() + args.settle
            query = sql.SQL("SELECT count(*) FROM {} WHERE status IN ('succeeded', 'dead', 'cancelled')"
                            ).format(jobs)
            while conn.execute(query).fetchone()[0] < sent + len(warm_ids):
                if time.monotonic() > deadline or not running():
                    raise RuntimeError(f"not every job finished within {args.settle:g}s"
                                       " of the last enqueue")
                time.sleep(0.05)
        drained = time.monotonic()
    finally:
        stop_sampler.set()
        for p in producers:
            p.stop_now.set()
            p.go.set()
        if sampler is not None:
            sampler.join(5.0)
        codes = [bench.stop_master(m) for m in masters]
    for code in codes:
        if code not in (0, None):
            master.problems.append(f"benchmark: jobrun-master exited with code {code}")

    with bench.connect() as conn:
        rows = conn.execute(sql.SQL(
            "SELECT extract(epoch FROM a.started_at - j.created_at)::float8 * 1000,"
            "       extract(epoch FROM a.finished_at - j.created_at)::float8 * 1000,"
            "       a.outcome"
            "  FROM {} j JOIN {} a ON a.job_id = j.id"
            " WHERE j.id <> ALL(%s)").format(jobs, sql.Identifier(schema, "job_attempts")),
            [warm_ids]).fetchall()
        statuses = dict(conn.execute(sql.SQL("SELECT status, count(*) FROM {} GROUP BY status")
                                     .format(jobs)).fetchall())
    series = {
        "enqueue-to-start": [r[0] for r in rows],
        "enqueue-to-finish": [r[1] for r in rows],
        "producer: enqueue call": [x * 1000 for p in producers for x in p.call],
        "producer: lateness at issue": [x * 1000 for p in producers for x in p.send_lag],
    }
    not_ok = sum(1 for r in rows if r[2] != "succeeded")
    skipped = sum(p.skipped for p in producers)
    run_s = ended - t0
    cores = cores_used(cpu_before, cpu_after, ended - cpu_mark)

    print(f"  sent {sent:,} of {total:,} ticks in {run_s:.2f}s ({sent / run_s:,.0f}/s achieved);"
          f" lagged ticks skipped: {skipped:,}; attempts recorded {len(rows):,}"
          f" ({not_ok} not succeeded); all done {drained - ended:.2f}s after the last enqueue;"
          f" job statuses {statuses}")
    print("  CPU cores busy during the run: " + ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
          + " (benchmark = producers and depth sampler; others = the rest of the machine)")
    print_table(["ms", "p50", "p95", "p99", "max"],
                [[name, *(percentile(v, p) for p in PCTS), max(v, default=None)]
                 for name, v in series.items()], digits=2, indent="  ")
    if depth:
        print("  queue depth each second, queued (runnable): " + " ".join(str(q) for _, q, _ in depth))
        print("                                      leased: " + " ".join(str(x) for _, _, x in depth))
    for line in [x for m in masters for x in m.problems][:10]:
        print(f"  ! {line}")
    bench.pgss_report(schema)
    print(flush=True)
    return {"series": series, "sent": sent, "skipped": skipped, "rate": sent / run_s,
            "depth_max": max((q for _, q, _ in depth), default=0), "not_ok": not_ok,
            "others": cores["others"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="jobs per second (default 200)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the run (default 20)")
    parser.add_argument("--concurrency", "-c", type=int, default=4, help="master -c (default 4)")
    parser.add_argument("--producers", type=int, default=1,
                        help="producer threads sharing the schedule, each with its own"
                        " connection (default 1)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs, each on a fresh schema and master; medians printed (default 1)")
    parser.add_argument("--task", choices=("noop", "cpu", "echo"), default="noop")
    parser.add_argument("--cpu-ms", type=float, default=5.0)
    parser.add_argument("--payload-bytes", type=int, default=1024,
                        help="echo: bytes of data in each payload, returned as its result (default 1024)")
    parser.add_argument("--log-lines", type=int, default=0,
                        help="echo: lines each job logs into its attempt log (default 0)")
    parser.add_argument("--settle", type=float, default=120.0,
                        help="seconds to wait after the last enqueue for every job to finish")
    add_db_args(parser)
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.producers < 1 or args.concurrency < 1 or args.repeat < 1:
        parser.error("--rate, --seconds, --producers, --repeat and -c must be positive")
    payload: Any = None
    if args.task == "cpu":
        payload = {"ms": args.cpu_ms}
    elif args.task == "echo":
        payload = {"data": "x" * args.payload_bytes, "log": args.log_lines}
    total = int(args.rate * args.seconds)

    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"latency: {args.task} jobs at {args.rate:g}/s for {args.seconds:g}s ({total:,} ticks),"
              f" master -c {args.concurrency}, {args.producers} producer(s), {args.repeat} run(s)")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}")
        print("  method: open loop, job i enqueued at t0 + i/rate (monotonic clock) by Client.enqueue,"
              " one transaction each; a tick reached a whole interval late is skipped and counted;"
              " latencies from database timestamps: started_at (claim) and finished_at"
              " (completion) of job_attempts minus jobs.created_at (enqueue)", flush=True)
        print()
        runs = []
        for r in range(args.repeat):
            print(f"run {r + 1}:")
            runs.append(run_once(bench, args, total, payload))
        if args.repeat > 1:
            print(f"median of {args.repeat} runs (of each percentile; the last column lists every run's p99):")
            rows = []
            for name in runs[0]["series"]:
                per_run = [{p: percentile(x["series"][name], p) for p in PCTS} for x in runs]
                rows.append([name, *(median([pr[p] for pr in per_run]) for p in PCTS),
                             median([max(x["series"][name], default=0.0) for x in runs]),
                             ", ".join(f"{pr[99]:.1f}" for pr in per_run)])
            print_table(["ms", "p50", "p95", "p99", "max", "p99 of each run"], rows, digits=2)
            skipped = ", ".join(str(x["skipped"]) for x in runs)
            depth_max = ", ".join(str(x["depth_max"]) for x in runs)
            others = ", ".join(f"{x['others']:.2f}" for x in runs)
            print(f"achieved rate {median([x['rate'] for x in runs]):,.0f}/s (median); ticks skipped"
                  f" {skipped}; queued max {depth_max}; other load on the machine (cores) {others}")
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
