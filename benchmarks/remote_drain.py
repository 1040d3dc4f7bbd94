"""Remote worker benchmark: a `jobrun worker` over `jobrun web`, side by side with a master.

    PYTHONPATH=. python benchmarks/remote_drain.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. python benchmarks/remote_drain.py --jobs 20000 --repeat 3 --latency-rate 1000

Drain: for each of --repeat rounds, alternated (remote, then master, so that a change in the
machine's other load falls on both): N noop jobs enqueued on a fresh schema; then either
`jobrun web` (a worker token file, on a loopback port) and one `jobrun worker -A
benchmarks.benchapp --slots S` (it registers 2 x S credits: --slots 32 is 64 credits), timed
from the worker's `remote.registered` line; or `jobrun-master -c C`, timed from `master.ready`.
The clock stops when a 50 ms poll sees no job queued or leased (benchmarks/drain.py's
run_once, which both go through).

Latency (``--latency-rate R``, 0 to skip): the open-loop producers of benchmarks/latency.py
(--producers threads sharing the schedule) at R jobs/s for --latency-seconds against each,
alternated the same way; finish = job_attempts.finished_at - jobs.created_at. The rate each
side achieved is printed too: a tick its producer reached a whole interval late is skipped.

Prints every run, the medians and the ratios (remote / master): drain rate (target >= 0.5)
and finish p99 (target <= 3).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks import drain, latency  # noqa: E402
from benchmarks.common import (Bench, MasterProc, add_db_args, describe_code, machine,  # noqa: E402
                               median, percentile, print_table, run_main)

TOKEN = "bench-remote-worker-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebProc(MasterProc):
    """`jobrun web` on a loopback port with a worker token file for the default queue."""

    READY = "Application startup complete."

    def __init__(self, dsn: str, schema: str, port: int, verbose: bool) -> None:
        super().__init__(dsn, schema, 0, verbose=verbose)
        self.port = port
        tokens = Path(self._tmp.name) / "workers"
        tokens.write_text(f"{TOKEN} default\n")
        tokens.chmod(0o600)
        self.tokens = tokens

    def command(self) -> list[str]:
        return [sys.executable, "-m", "jobrun", "web", "--bind", f"127.0.0.1:{self.port}",
                "--worker-token-file", str(self.tokens)]

    def wait_children_idle(self, timeout: float = 60.0) -> float:
        return time.monotonic()


class WorkerProc(MasterProc):
    """`jobrun worker -A benchmarks.benchapp --slots S`, with no database in its environment."""

    READY = "remote.registered"

    def __init__(self, url: str, slots: int, verbose: bool) -> None:
        super().__init__("", "", slots, verbose=verbose)
        self.url = url
        self.token = Path(self._tmp.name) / "token"
        self.token.write_text(TOKEN + "\n")
        self.token.chmod(0o600)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "jobrun", "worker", "--url", self.url, "--token-file",
                str(self.token), "-A", "benchmarks.benchapp", "--slots", str(self.concurrency),
                "--name", "bench", "--grace", "10"]

    def env(self) -> dict[str, str]:
        env = super().env()
        for key in ("JOBRUN_DATABASE_URL", "JOBRUN_SCHEMA"):
            env.pop(key, None)
        return env

    def wait_children_idle(self, timeout: float = 60.0) -> float:
        return time.monotonic()


def remote_starter(bench: Bench, slots: int):
    """``start(schema)`` for drain/latency.run_once: the worker first (stopped first)."""
    def start(schema: str) -> list[MasterProc]:
        verbose = bench.args.verbose
        web = WebProc(bench.dsn, schema, free_port(), verbose)
        bench.masters.append(web)
        web.start()
        web.wait_ready(timeout=60)
        worker = WorkerProc(f"http://127.0.0.1:{web.port}", slots, verbose)
        bench.masters.append(worker)
        worker.start()
        return [worker, web]
    return start


def drains(bench: Bench, args: argparse.Namespace) -> dict[str, list[float]]:
    options = SimpleNamespace(jobs=args.jobs, task="noop", timeout=args.timeout, masters=1,
                              quiet_below=args.quiet_below, patience=args.patience)
    rates: dict[str, list[float]] = {"remote": [], "master": []}
    for r in range(args.repeat):
        for side in ("remote", "master"):
            start = remote_starter(bench, args.slots) if side == "remote" else None
            res = drain.run_once(bench, options, args.concurrency, None, start=start)
            res.pop("report")()  # with --pgss: the statements of the run
            rates[side].append(res["wall_rate"])
            print(f"  drain run {r + 1} {side:6}: {res['wall_rate']:8,.0f} jobs/s"
                  f" ({res['wall_s']:.2f}s), db {res['db_rate']:8,.0f} jobs/s; cores "
                  + ", ".join(f"{k} {v:.2f}" for k, v in res["cores"].items()), flush=True)
            for line in res["problems"][:5]:
                print(f"    ! {line}", flush=True)
    return rates


def latencies(bench: Bench, args: argparse.Namespace) -> dict[str, list[float]]:
    options = SimpleNamespace(concurrency=args.concurrency, producers=args.producers,
                              rate=args.latency_rate,
                              task="noop", settle=120.0, quiet_below=args.quiet_below,
                              patience=args.patience)
    total = int(args.latency_rate * args.latency_seconds)
    p99: dict[str, list[float]] = {"remote": [], "master": [], "remote rate": [],
                                   "master rate": []}
    for r in range(args.repeat):
        for side in ("remote", "master"):
            print(f"latency run {r + 1}, {side}:")
            start = remote_starter(bench, args.slots) if side == "remote" else None
            res = latency.run_once(bench, options, total, None, start=start)
            p99[side].append(percentile(res["series"]["enqueue-to-finish"], 99))
            p99[f"{side} rate"].append(res["rate"])
    return p99


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per drain (default 20000)")
    parser.add_argument("--slots", type=int, default=32,
                        help="jobrun worker --slots (credits: twice that; default 32)")
    parser.add_argument("--concurrency", "-c", type=int, default=4, help="master -c (default 4)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternated (default 3)")
    parser.add_argument("--latency-rate", type=float, default=1000.0,
                        help="jobs/s of the latency runs (default 1000; 0: no latency runs)")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--producers", type=int, default=4,
                        help="latency: producer threads sharing the schedule (default 4)")
    parser.add_argument("--no-drain", action="store_true", help="latency runs only")
    parser.add_argument("--timeout", type=float, default=600.0)
    add_db_args(parser)
    args = parser.parse_args(argv)
    if args.jobs < 10 or args.repeat < 1 or args.slots < 1:
        parser.error("--jobs must be at least 10, --repeat and --slots at least 1")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"remote_drain: jobrun worker --slots {args.slots} ({2 * args.slots} credits) over"
              f" jobrun web vs jobrun-master -c {args.concurrency}; {args.repeat} rounds,"
              " alternated")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}", flush=True)
        rows: list[list[Any]] = []
        if not args.no_drain:
            rates = drains(bench, args)
            rows.append([f"drain {args.jobs:,} noop, jobs/s", median(rates["remote"]),
                         median(rates["master"]),
                         median(rates["remote"]) / median(rates["master"]), ">= 0.5"])
        if args.latency_rate > 0:
            p99 = latencies(bench, args)
            rows.append([f"finish p99 at {args.latency_rate:g}/s, ms", median(p99["remote"]),
                         median(p99["master"]), median(p99["remote"]) / median(p99["master"]),
                         "<= 3"])
            rows.append(["  rate achieved, jobs/s", median(p99["remote rate"]),
                         median(p99["master rate"]),
                         median(p99["remote rate"]) / median(p99["master rate"]), ""])
        print(f"\nmedians of {args.repeat} rounds:")
        print_table(["", "remote", "master", "remote/master", "target"], rows, digits=2)
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
