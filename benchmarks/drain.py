"""Drain benchmark: how fast does one master empty a full queue?

    PYTHONPATH=. python benchmarks/drain.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/drain.py --pg-bin /usr/lib/postgresql/15/bin \\
        --task cpu --cpu-ms 5 --jobs 4000 --concurrency 1,2,4
    PYTHONPATH=. python benchmarks/drain.py --pg-bin /usr/lib/postgresql/15/bin \
        --task echo --payload-bytes 65536 --log-lines 3 --jobs 5000 --concurrency 4
    PYTHONPATH=. python benchmarks/drain.py --pg-bin /usr/lib/postgresql/15/bin \
        --masters 4 --concurrency 8          # four masters at -c 2 each

For each concurrency C (and each of --repeat runs): a fresh schema; N jobs enqueued with
Client.enqueue_many while no master runs; then `jobrun-master -A benchmarks.benchapp -c C`
starts and the clock runs from its `master.ready` log line until a 50 ms poll sees no job
queued or leased (an EXISTS on each partial index: a count would take database CPU from the
run). The same run is also timed from database
timestamps: N / (max(job_attempts.finished_at) - min(job_attempts.started_at)).

``--masters M`` starts M masters on the same schema, each at -c C/M (the same total
concurrency), and times from the last one's `master.ready`. ``--task echo`` runs jobs with a
``--payload-bytes`` string in their payload, returned as their result, each logging
``--log-lines`` lines kept as its attempt log.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import Client  # noqa: E402

from benchmarks.common import (run_main, Bench, MasterProc, add_db_args, cores_used, cpu_seconds, describe_code,  # noqa: E402
                               int_list, machine, median, print_table, wait_quiet)

POLL = 0.05
CPU_KINDS = ("master", "children", "postgres", "others")
ENQUEUE_CHUNK = 5000


def enqueue(dsn: str, schema: str, task: str, payload: Any, n: int) -> float:
    started = time.monotonic()
    with Client(dsn, schema=schema) as client:
        left = n
        while left:
            chunk = min(ENQUEUE_CHUNK, left)
            client.enqueue_many([(task, payload)] * chunk)
            left -= chunk
    return time.monotonic() - started


def run_once(bench: Bench, args: argparse.Namespace, concurrency: int, payload: Any,
             prepare: Callable[[str], None] | None = None,
             start: Callable[[str], list[MasterProc]] | None = None) -> dict[str, Any]:
    """One drain; ``prepare(schema)`` runs after the enqueue, before the master starts (queue
    settings, say: benchmarks/limits.py). ``start(schema)`` starts what drains instead of
    masters (processes with a MasterProc's interface, timed from the last one's READY line:
    benchmarks/remote_drain.py)."""
    n = args.jobs
    schema = bench.new_schema()
    enqueue_s = enqueue(bench.dsn, schema, args.task, payload, n)
    if prepare is not None:
        prepare(schema)
    jobs = sql.Identifier(schema, "jobs")
    attempts = sql.Identifier(schema, "job_attempts")
    commits_before = bench.commits()
    bench.pgss_reset()
    wait_quiet(args.quiet_below, args.patience)

    count = getattr(args, "masters", 1)  # other benchmarks call run_once with their own args
    masters = start(schema) if start is not None else \
        [bench.start_master(schema, concurrency // count) for _ in range(count)]
    master = masters[0]
    polls = 0
    try:
        ready = max(m.wait_ready(timeout=120) for m in masters)
        postmaster = bench.postmaster_pid()
        cpu_before = cpu_seconds([m.pid for m in masters], postmaster)
        # The poll itself costs database CPU, so it only asks whether any job is still to do
        # (the first entry of the partial indexes on queued and leased rows): a count of
        # those took 9 ms at 20,000 jobs, a fifth of a core at 20 polls a second, taken from
        # the run it measures. The count is read only to report a timeout.
        left_q = sql.SQL("SELECT count(*) FROM {} WHERE status IN ('queued', 'leased')").format(jobs)
        busy_q = sql.SQL("SELECT EXISTS (SELECT FROM {0} WHERE status = 'queued')"
                         "    OR EXISTS (SELECT FROM {0} WHERE status = 'leased')").format(jobs)
        failed_q = sql.SQL("SELECT count(*) FROM {} WHERE status IN ('dead', 'cancelled')").format(jobs)
        deadline = ready + args.timeout
        failed = 0
        with bench.connect() as conn:
            while True:
                done = 0 if conn.execute(busy_q).fetchone()[0] else n
                polls += 1
                if polls % 20 == 0:
                    failed = conn.execute(failed_q).fetchone()[0]
                    polls += 1
                now = time.monotonic()
                if done >= n:
                    cpu_after = cpu_seconds([m.pid for m in masters], postmaster)
                    break
                if failed:
                    raise RuntimeError(f"{failed} jobs ended dead or cancelled; see the master log")
                for m in masters:
                    if not m.running():
                        raise RuntimeError(f"jobrun-master exited early (code {m.popen.returncode})")
                if now > deadline:
                    done = n - conn.execute(left_q).fetchone()[0]
                    raise RuntimeError(f"only {done} of {n} jobs succeeded after {args.timeout:g}s")
                time.sleep(POLL)
        finished = now
    finally:
        codes = [bench.stop_master(m) for m in masters]
    for code in codes:
        if code not in (0, None):
            master.problems.append(f"benchmark: jobrun-master exited with code {code}")
    commits = bench.commits() - commits_before - polls

    with bench.connect() as conn:
        row = conn.execute(sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE outcome <> 'succeeded'),"
            " extract(epoch FROM max(finished_at) - min(started_at))::float8,"
            " extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY finished_at)"
            "                  - percentile_disc(0.1) WITHIN GROUP (ORDER BY finished_at))::float8"
            " FROM {}").format(attempts)).fetchone()
    n_attempts, not_ok, db_span, mid_span = row
    wall = finished - ready
    result = {
        "c": concurrency, "enqueue_s": enqueue_s, "startup_s": ready - master.started_at,
        "wall_s": wall, "wall_rate": n / wall, "db_span_s": db_span,
        "db_rate": n / db_span if db_span else float("nan"),
        "mid_rate": 0.8 * n / mid_span if mid_span else float("nan"),
        "commits_per_job": commits / n, "attempts": n_attempts, "not_ok": not_ok,
        "problems": [line for m in masters for line in m.problems],
        "cores": cores_used(cpu_before, cpu_after, wall),
    }
    result["report"] = lambda: bench.pgss_report(schema)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per run (default 20000)")
    parser.add_argument("--concurrency", type=int_list, default=[1, 2, 4, 16],
                        help="comma-separated -c values (default 1,2,4,16)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per -c value (default 3)")
    parser.add_argument("--task", choices=("noop", "cpu", "echo"), default="noop")
    parser.add_argument("--payload-bytes", type=int, default=1024,
                        help="echo: bytes of data in each payload, returned as its result (default 1024)")
    parser.add_argument("--log-lines", type=int, default=0,
                        help="echo: lines each job logs into its attempt log (default 0)")
    parser.add_argument("--masters", type=int, default=1,
                        help="masters on the one schema, each at -c C/M (default 1)")
    parser.add_argument("--cpu-ms", type=float, default=5.0,
                        help="CPU milliseconds each cpu job burns (default 5)")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up a run after this many seconds")
    add_db_args(parser)
    args = parser.parse_args(argv)
    if args.jobs < 10 or args.repeat < 1:
        parser.error("--jobs must be at least 10 and --repeat at least 1")
    if args.masters < 1 or any(c % args.masters for c in args.concurrency):
        parser.error("--masters must divide every --concurrency value")
    payload: Any = None
    what = "noop"
    if args.task == "cpu":
        payload, what = {"ms": args.cpu_ms}, f"cpu ({args.cpu_ms:g} ms CPU each)"
    elif args.task == "echo":
        payload = {"data": "x" * args.payload_bytes, "log": args.log_lines}
        what = f"echo ({args.payload_bytes:,} B payload and result, {args.log_lines} log lines)"
    if args.masters > 1:
        what += f", {args.masters} masters sharing -c"

    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"drain: {args.jobs:,} {what} jobs per run, -c {','.join(map(str, args.concurrency))},"
              f" {args.repeat} runs each")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}")
        print("  method: jobs enqueued (Client.enqueue_many) before the master starts; wall = from the"
              " master's `master.ready` log line until a 50 ms poll sees no job queued or leased; db = N /"
              " (max(finished_at) - min(started_at)) of job_attempts; mid-80% = the rate between the"
              " 10th and 90th percentile finished_at; fresh schema per run", flush=True)
        results: dict[int, list[dict[str, Any]]] = {}
        for c in args.concurrency:
            for r in range(args.repeat):
                res = run_once(bench, args, c, payload)
                results.setdefault(c, []).append(res)
                print(f"  -c {c:<3} run {r + 1}: wall {res['wall_rate']:8,.0f} jobs/s"
                      f" ({res['wall_s']:.2f}s)   db {res['db_rate']:8,.0f} jobs/s"
                      f"   mid-80% {res['mid_rate']:8,.0f} jobs/s   ready after"
                      f" {res['startup_s']:.2f}s   enqueue {res['enqueue_s']:.2f}s"
                      f"   ~{res['commits_per_job']:.2f} commits/job", flush=True)
                print("           CPU cores busy while draining: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in res["cores"].items()), flush=True)
                if res["attempts"] != args.jobs or res["not_ok"]:
                    print(f"    ! {res['attempts']} attempts recorded for {args.jobs} jobs,"
                          f" {res['not_ok']} not succeeded", flush=True)
                for line in res["problems"][:10]:
                    print(f"    ! {line}", flush=True)
                res.pop("report")()
        print()
        print(f"median of {args.repeat} runs, {args.jobs:,} {what} jobs:")
        rows = []
        for c, runs in results.items():
            rows.append([c, median([x["wall_rate"] for x in runs]), median([x["db_rate"] for x in runs]),
                         median([x["mid_rate"] for x in runs]), median([x["wall_s"] for x in runs]),
                         median([x["startup_s"] for x in runs]),
                         median([x["commits_per_job"] for x in runs]),
                         min(x["wall_rate"] for x in runs), max(x["wall_rate"] for x in runs),
                         *(median([x["cores"][k] for x in runs]) for k in CPU_KINDS)])
        print_table(["-c", "wall jobs/s", "db jobs/s", "mid-80% jobs/s", "wall s", "ready s",
                     "commits/job", "wall min", "wall max",
                     *(f"{k} cores" for k in CPU_KINDS)], rows, digits=2)
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
