"""Memory: what one master and its children hold while many jobs are in flight.

    PYTHONPATH=. .venv/bin/python benchmarks/memory.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. .venv/bin/python benchmarks/memory.py --pg-bin /usr/lib/postgresql/15/bin \\
        --cases async,thread,plain                      # threads too
    PYTHONPATH=. .venv/bin/python benchmarks/memory.py --pg-bin /usr/lib/postgresql/15/bin \\
        --slots 20 --hold 30                            # a quick look: 40 jobs in flight

Each case: a fresh schema; exactly as many jobs as the master can run at once enqueued
(benchapp's ``sleep`` or ``sleep-sync``, each waiting --hold seconds); `jobrun-master -A
benchmarks.benchapp` started; then, once every one of those jobs runs (the children's process
titles, ``jobrun-child N: B/S slots`` or one job each, add up to all of them, and the database
holds them all leased), the proportional set size (``Pss`` of /proc/PID/smaps_rollup: each
page shared by k processes counts 1/k in each) of the master, its fork server and its
children, summed. PSS, unlike RSS, adds up: the sum is what the group costs the machine.
USS (private pages) and RSS are printed beside it.

Cases (--cases):
  async   -c C --slots S, C x S jobs of ``sleep`` (``async def``, awaiting asyncio.sleep):
          tasks on each child's event loop.
  thread  -c C --slots S, C x S jobs of ``sleep-sync`` (a plain time.sleep declared
          slots=True): each child's thread pool.
  plain   -c C, C jobs of ``sleep``: one job a child, the reference without slots.

The summary prints each case's total and, for a slots case, what each job in flight beyond
the reference's costs. Memory depends on the Python build, the app and the allocator: compare
cases of one run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (Bench, MasterProc, add_db_args, describe_code, machine,  # noqa: E402
                               print_table, run_main)
from benchmarks.drain import enqueue  # noqa: E402

MIB = 1024 * 1024
POLL = 0.1
CASES = {"async": ("sleep", True), "thread": ("sleep-sync", True), "plain": ("sleep", False)}
_SLOTS_TITLE = re.compile(r": (\d+)/(\d+) slots$")


def smaps_rollup(pid: int) -> dict[str, int] | None:
    """Pss, Rss and USS (Private_Clean + Private_Dirty) of a process, in bytes."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB":
                    fields[name] = int(parts[0]) * 1024
    except OSError:
        return None
    return {"pss": fields.get("Pss", 0), "rss": fields.get("Rss", 0),
            "uss": fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)}


def role(title: str) -> str:
    if title.startswith("jobrun-forkserver"):
        return "fork server"
    if title.startswith("jobrun-child"):
        return title.split(":", 1)[0].replace("jobrun-", "")
    return title.split(" ", 1)[0] or "?"


def running(title: str) -> int:
    """Jobs a child's process title says it runs: ``B/S slots``, or one job (``job=ID``)."""
    match = _SLOTS_TITLE.search(title)
    if match:
        return int(match.group(1))
    return 1 if " job=" in title else 0


def wait_in_flight(bench: Bench, master: MasterProc, schema: str, n: int,
                   timeout: float) -> float:
    """Block until ``n`` jobs run (titles) and are leased (database); returns the seconds."""
    began = time.monotonic()
    leased_q = sql.SQL("SELECT count(*) FROM {} WHERE status = 'leased'").format(
        sql.Identifier(schema, "jobs"))
    with bench.connect() as conn:
        while True:
            busy = sum(running(t) for t in master.children().values())
            leased = conn.execute(leased_q).fetchone()[0] if busy >= n else 0
            if busy >= n and leased >= n:
                return time.monotonic() - began
            if not master.running():
                raise RuntimeError(f"jobrun-master exited (code {master.popen.returncode})")
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"{busy} of {n} jobs running ({leased} leased) after {timeout:g}s;"
                                   " too few children or slots, or --hold too short?")
            time.sleep(POLL)


def measure(master: MasterProc) -> list[dict[str, Any]]:
    """One row per process of the group: the master, then its children by pid."""
    rows = []
    procs = {master.pid: "jobrun-master", **master.children()}
    for pid, title in procs.items():
        mem = smaps_rollup(pid)
        if mem is None:  # it exited between the listing and the read
            continue
        rows.append({"pid": pid, "role": "master" if pid == master.pid else role(title),
                     "jobs": 0 if pid == master.pid else running(title), **mem})
    return rows


def run_case(bench: Bench, args: argparse.Namespace, case: str) -> dict[str, Any]:
    task, slotted = CASES[case]
    n = args.concurrency * (args.slots if slotted else 1)
    schema = bench.new_schema()
    enqueue(bench.dsn, schema, task, {"s": args.hold}, n)
    extra = ["--slots", str(args.slots)] if slotted else []
    master = bench.start_master(schema, args.concurrency, extra)
    try:
        master.wait_ready(timeout=120)
        waited = wait_in_flight(bench, master, schema, n, args.timeout)
        time.sleep(args.settle)  # a measurement choice: allocations after the last start settle
        rows = measure(master)
        still = sum(r["jobs"] for r in rows)
        if still < n:
            raise RuntimeError(f"only {still} of {n} jobs still ran when measured: raise --hold")
    finally:
        code = bench.stop_master(master)
    for line in master.problems[:10]:
        if "benchmark:" not in line:  # stopping the held jobs is expected
            print(f"    ! {line}", flush=True)
    label = f"-c {args.concurrency}" + (f" --slots {args.slots}" if slotted else "")
    return {"case": case, "label": f"{label}, {task}", "jobs": n, "rows": rows, "waited": waited,
            "exit": code, "pss": sum(r["pss"] for r in rows), "uss": sum(r["uss"] for r in rows),
            "rss": sum(r["rss"] for r in rows)}


def report(res: dict[str, Any]) -> None:
    print(f"\n  {res['case']}: {res['label']}, {res['jobs']:,} jobs in flight (all running"
          f" {res['waited']:.1f}s after the master was ready); total PSS {res['pss'] / MIB:,.1f} MiB")
    table = [[str(r["pid"]), r["role"], r["jobs"], r["pss"] / MIB, r["uss"] / MIB, r["rss"] / MIB]
             for r in res["rows"]]
    table.append(["", "total", sum(r["jobs"] for r in res["rows"]), res["pss"] / MIB,
                  res["uss"] / MIB, None])
    print_table(["pid", "process", "jobs", "PSS MiB", "USS MiB", "RSS MiB"], table, digits=1,
                indent="    ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="async,plain",
                        help="comma-separated, of async, thread, plain (default async,plain)")
    parser.add_argument("--concurrency", "-c", type=int, default=2, help="children (default 2)")
    parser.add_argument("--slots", type=int, default=500,
                        help="--slots of the async and thread cases (default 500)")
    parser.add_argument("--hold", type=float, default=120.0,
                        help="seconds each job sleeps; must outlast the wait (default 120)")
    parser.add_argument("--timeout", type=float, default=90.0,
                        help="give up when the jobs do not all run within this (default 90 s)")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="seconds between all jobs running and the reading (default 2)")
    add_db_args(parser)
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown or not cases:
        parser.error(f"unknown case(s) {', '.join(unknown) or '(none)'}: of {', '.join(CASES)}")
    if args.concurrency < 1 or args.slots < 2 or args.hold <= args.settle:
        parser.error("--concurrency at least 1, --slots at least 2, --hold longer than --settle")
    if not os.path.exists(f"/proc/{os.getpid()}/smaps_rollup"):
        parser.error("this kernel has no /proc/PID/smaps_rollup (Linux 4.14 or later)")

    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"memory: cases {', '.join(cases)}; -c {args.concurrency}, --slots {args.slots},"
              f" jobs sleeping {args.hold:g}s")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}", flush=True)
        results = []
        for case in cases:
            res = run_case(bench, args, case)
            results.append(res)
            report(res)
        plain = next((r for r in results if r["case"] == "plain"), None)
        print("\nsummary (PSS: master, fork server and children summed):")
        table = []
        for r in results:
            extra = None
            if plain is not None and r is not plain and r["jobs"] > plain["jobs"]:
                extra = (r["pss"] - plain["pss"]) / (r["jobs"] - plain["jobs"]) / 1024
            table.append([r["label"], r["jobs"], r["pss"] / MIB, r["uss"] / MIB,
                          len(r["rows"]), extra])
        print_table(["case", "jobs in flight", "PSS MiB", "USS MiB", "processes",
                     "KiB a job beyond plain"], table, digits=1)
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
