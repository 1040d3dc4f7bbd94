"""Respawn benchmark: what a child costs to start, with ``--spawn fork`` and ``--spawn exec``.

    PYTHONPATH=. .venv/bin/python benchmarks/respawn.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. .venv/bin/python benchmarks/respawn.py --jobs 50 --modes fork,exec   # smoke

For each mode (and each of --repeat runs), on a fresh schema:

1. start: ``jobrun-master -c 16``; the time from the master's exec until all 16 children
   report idle (their process titles), and from its ``master.ready`` line (the first child
   ready) until all 16 are. Then the PSS (``/proc/<pid>/smaps_rollup``) of each idle child
   (median), of the master and of the fork server. PSS divides each shared page among the
   processes that map it, so forked children sharing the fork server's pages show less.
2. respawn: --jobs noop jobs enqueued, then ``jobrun-master -c 2 --max-tasks-per-child 1``
   drains them: every job runs in a fresh child. Jobs/s are N / (last attempt finished -
   first started), from the database. CPU per replacement child is the CPU of every child
   the master reaped during the drain (its cutime + cstime) plus the fork server's, over N;
   faults per child are those children's minor page faults (cminflt) over N.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import Client  # noqa: E402

from benchmarks.common import (Bench, MasterProc, add_db_args, describe_code, machine, median,  # noqa: E402
                               print_table, run_main)

_TICK = os.sysconf("SC_CLK_TCK")
START_CONCURRENCY = 16


def pss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def cpu_of(pid: int) -> tuple[float, float]:
    """(own CPU seconds, CPU seconds of its reaped children) of a live process."""
    fields = _stat(pid)
    if fields is None:
        return float("nan"), float("nan")
    return (int(fields[11]) + int(fields[12])) / _TICK, (int(fields[13]) + int(fields[14])) / _TICK


def reaped_faults(pid: int) -> float:
    """Minor page faults of a live process's reaped children (copy-on-write faults, for a
    forked child, make most of its start's CPU)."""
    fields = _stat(pid)
    return float("nan") if fields is None else float(fields[8])


def split(master: MasterProc) -> tuple[list[int], list[int]]:
    """(children, fork servers) of a master, by process title."""
    kids, servers = [], []
    for pid, title in master.children().items():
        (servers if title.startswith("jobrun-forkserver") else kids).append(pid)
    return kids, servers


def start_run(bench: Bench, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    schema = bench.new_schema()
    master = bench.start_master(schema, START_CONCURRENCY, ["--spawn", mode, "-A", args.app])
    ready = master.wait_ready()
    idle = master.wait_children_idle()
    kids, servers = split(master)
    out = {"start_s": idle - master.started_at, "ready_to_all_s": idle - ready,
           "child_pss": median([pss_mib(p) for p in kids]), "master_pss": pss_mib(master.pid),
           "server_pss": pss_mib(servers[0]) if servers else None}
    bench.stop_master(master)
    return out


def respawn_run(bench: Bench, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    schema = bench.new_schema()
    with Client(bench.dsn, schema=schema) as client:
        client.enqueue_many([(args.task, None)] * args.jobs)
    master = bench.start_master(schema, 2, ["--spawn", mode, "-A", args.app,
                                            "--max-tasks-per-child", "1"])
    master.wait_ready()
    _, servers = split(master)
    _, reaped_before = cpu_of(master.pid)
    faults_before = reaped_faults(master.pid)
    server_before = cpu_of(servers[0])[0] if servers else 0.0
    jobs = sql.Identifier(schema, "jobs")
    attempts = sql.Identifier(schema, "job_attempts")
    deadline = time.monotonic() + args.timeout
    with bench.connect() as conn:
        while conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE status = 'succeeded'")
                           .format(jobs)).fetchone()[0] < args.jobs:
            if time.monotonic() > deadline or not master.running():
                raise RuntimeError(f"{mode}: the drain did not finish within {args.timeout:g}s")
            time.sleep(0.05)  # a progress poll of the database, not synchronisation
        span = conn.execute(sql.SQL("SELECT extract(epoch FROM max(finished_at) - min(started_at))"
                                    " FROM {}").format(attempts)).fetchone()[0]
    _, servers_now = split(master)
    server_after = cpu_of(servers_now[0])[0] if servers_now == servers and servers else server_before
    _, reaped_after = cpu_of(master.pid)
    faults = reaped_faults(master.pid) - faults_before
    bench.stop_master(master)
    cpu = (reaped_after - reaped_before) + (server_after - server_before)
    return {"jobs_s": args.jobs / float(span), "cpu_ms": 1000 * cpu / args.jobs,
            "faults": faults / args.jobs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_db_args(parser)
    parser.add_argument("--modes", default="fork,exec", help="comma-separated: fork, exec")
    parser.add_argument("--jobs", type=int, default=400, help="noop jobs per respawn drain")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--app", default="benchmarks.benchapp", help="the -A of every master")
    parser.add_argument("--task", default="noop", help="the task the drain enqueues")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per drain at most")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print(f"code: {describe_code()}\nmachine: {machine()}", flush=True)
    rows = []
    with Bench(args) as bench:
        for mode in modes:
            starts = [start_run(bench, args, mode) for _ in range(args.repeat)]
            drains = [respawn_run(bench, args, mode) for _ in range(args.repeat)]
            pick = lambda runs, key: median([r[key] for r in runs if r[key] is not None]) \
                if any(r[key] is not None for r in runs) else None  # noqa: E731
            rows.append([mode, pick(drains, "jobs_s"), pick(drains, "cpu_ms"), pick(drains, "faults"),
                         pick(starts, "start_s"), pick(starts, "ready_to_all_s"),
                         pick(starts, "child_pss"), pick(starts, "master_pss"),
                         pick(starts, "server_pss")])
            print(f"  {mode}: done", file=sys.stderr, flush=True)
    print(f"\n-c 2 --max-tasks-per-child 1 drain of {args.jobs} {args.task} jobs; -c {START_CONCURRENCY}"
          f" start; app {args.app}; median of {args.repeat}")
    print_table(["spawn", "jobs/s", "CPU ms/child", "faults/child", f"start->{START_CONCURRENCY} idle s",
                 f"ready->{START_CONCURRENCY} idle s", "PSS/child MiB", "PSS master MiB",
                 "PSS forkserver MiB"], rows, digits=3)
    return 0


if __name__ == "__main__":
    run_main(main)
