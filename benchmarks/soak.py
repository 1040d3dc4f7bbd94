"""Soak benchmark: a real master under a steady open-loop load for minutes; do the tables stay
small and the claim cheap?

    PYTHONPATH=. python benchmarks/soak.py --pg-bin /usr/lib/postgresql/15/bin              # 10 min
    PYTHONPATH=. python benchmarks/soak.py --pg-bin /usr/lib/postgresql/15/bin --minutes 2  # quick

`jobrun-master -A benchmarks.benchapp -c 4 --retention 1m` runs on a fresh schema (so the
retention purge deletes finished jobs older than a minute, every purge interval); producer
threads enqueue noop jobs open loop at `--rate` (default 500 jobs/s), one Client.enqueue
(one transaction) per job, job i at t0 + i/rate (a tick reached a whole interval late is
skipped and counted). Every `--every` seconds (default 30) it prints: queue depth, the
completion rate over the interval (jobs enqueued minus jobs still queued or leased, so the
purge does not hide any), enqueue-to-start p50/p99 of the jobs that finished in the
interval (database timestamps), the sizes of jobs and job_attempts (pg_total_relation_size,
and pg_relation_size of each index), and n_live_tup / n_dead_tup / last_autovacuum /
autovacuum_count from pg_stat_user_tables. At the end: sizes before/after, the dead-tuple
peak of each half of the run, and whether autovacuum kept up.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from typing import Any

from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    from pathlib import Path

    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun import Client  # noqa: E402

from benchmarks.common import (run_main, Bench, add_db_args, describe_code, machine, percentile,  # noqa: E402
                               print_table)

TABLES = ("jobs", "job_attempts")


class Producer(threading.Thread):
    """Ticks index, index+P, ... of t0 + i/rate; each tick one Client.enqueue."""

    def __init__(self, dsn: str, schema: str, index: int, producers: int, rate: float) -> None:
        super().__init__(name=f"producer-{index}", daemon=True)
        self.client = Client(dsn, schema=schema)
        self.index, self.producers, self.rate = index, producers, rate
        self.t0 = 0.0
        self.go = threading.Event()
        self.stop_now = threading.Event()
        self.sent = 0
        self.skipped = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.client.stats()  # opens the connection
            self.go.wait()
            step = self.producers / self.rate
            i = self.index
            while not self.stop_now.is_set():
                target = self.t0 + i / self.rate
                now = time.monotonic()
                if now < target:
                    if self.stop_now.wait(target - now):
                        break
                elif now - target >= step:
                    missed = int((now - target) / step)
                    self.skipped += missed
                    i += missed * self.producers
                    continue
                self.client.enqueue("noop", None)
                self.sent += 1
                i += self.producers
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.client.close()


def snapshot(conn, schema: str) -> dict[str, Any]:
    out: dict[str, Any] = {"tables": {}, "indexes": {}}
    for table in TABLES:
        reg = f'"{schema}".{table}'
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass), pg_relation_size(%s::regclass),"
            "       s.n_live_tup, s.n_dead_tup, s.last_autovacuum, s.autovacuum_count,"
            "       s.last_autoanalyze"
            "  FROM pg_stat_user_tables s WHERE s.schemaname = %s AND s.relname = %s",
            [reg, reg, schema, table]).fetchone()
        out["tables"][table] = {"total": row[0], "heap": row[1], "live": row[2], "dead": row[3],
                                "last_autovacuum": row[4], "autovacuums": row[5]}
        for name, size in conn.execute(
                "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i"
                "  JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE i.indrelid = %s::regclass ORDER BY c.relname", [reg]).fetchall():
            out["indexes"][name] = size
    depth = conn.execute(sql.SQL(
        "SELECT (SELECT count(*) FROM {j} WHERE status = 'queued'),"
        "       (SELECT count(*) FROM {j} WHERE status = 'leased')").format(
        j=sql.Identifier(schema, "jobs"))).fetchone()
    out["queued"], out["leased"] = depth
    out["now"] = conn.execute("SELECT now()").fetchone()[0]
    return out


def mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


def wait_percentiles(conn, schema: str, since) -> tuple[float, float, int]:
    rows = conn.execute(sql.SQL(
        "SELECT extract(epoch FROM a.started_at - j.created_at)::float8 * 1000"
        "  FROM {a} a JOIN {j} j ON j.id = a.job_id WHERE a.finished_at >= %s").format(
        a=sql.Identifier(schema, "job_attempts"), j=sql.Identifier(schema, "jobs")),
        [since]).fetchall()
    values = [r[0] for r in rows]
    return percentile(values, 50), percentile(values, 99), len(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    parser.add_argument("--rate", type=float, default=500.0, help="jobs per second (default 500)")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between reports (default 30)")
    parser.add_argument("--concurrency", "-c", type=int, default=4)
    parser.add_argument("--retention", default="1m", help="master --retention (default 1m)")
    parser.add_argument("--producers", type=int, default=2)
    add_db_args(parser)
    args = parser.parse_args(argv)

    begun = time.monotonic()
    with Bench(args) as bench:
        print(f"soak: noop jobs at {args.rate:g}/s for {args.minutes:g} min against jobrun-master"
              f" -c {args.concurrency} --retention {args.retention}; report every {args.every:g}s")
        print(f"  {bench.describe()}; jobrun {describe_code()}; {machine()}", flush=True)
        schema = bench.new_schema()
        master = bench.start_master(schema, args.concurrency, extra=["--retention", args.retention])
        producers = [Producer(bench.dsn, schema, p, args.producers, args.rate)
                     for p in range(args.producers)]
        reports: list[list[Any]] = []
        dead_series: list[tuple[float, int, int]] = []
        try:
            master.wait_ready(timeout=120)
            master.wait_children_idle(timeout=120)
            with bench.connect() as conn:
                before = snapshot(conn, schema)
                for p in producers:
                    p.start()
                t0 = time.monotonic() + 0.2
                for p in producers:
                    p.t0 = t0
                    p.go.set()
                end = t0 + args.minutes * 60
                last_t, last_done, last_db = t0, 0, before["now"]
                k = 1
                while True:
                    wake = min(t0 + k * args.every, end)
                    while time.monotonic() < wake:
                        time.sleep(min(0.5, max(0.0, wake - time.monotonic())))
                        if not master.running():
                            raise RuntimeError("jobrun-master exited during the soak")
                        if any(p.error for p in producers):
                            raise RuntimeError(f"a producer failed: {next(p.error for p in producers if p.error)!r}")
                    now = time.monotonic()
                    snap = snapshot(conn, schema)
                    sent = sum(p.sent for p in producers)
                    done = sent - snap["queued"] - snap["leased"]
                    rate = (done - last_done) / (now - last_t)
                    p50, p99, n = wait_percentiles(conn, schema, last_db)
                    jobs, att = snap["tables"]["jobs"], snap["tables"]["job_attempts"]
                    dead_series.append((now - t0, jobs["dead"], att["dead"]))
                    purged = sum(int(m.group(1)) for _, line in list(master.lines)
                                 if (m := re.search(r"retention\.purged jobs=(\d+)", line)))
                    reports.append([round(now - t0), snap["queued"], snap["leased"], rate, p50, p99,
                                    mib(jobs["total"]), mib(att["total"]), jobs["live"], jobs["dead"],
                                    jobs["autovacuums"], att["dead"], purged])
                    last_av = (f"last {jobs['last_autovacuum']:%H:%M:%S}" if jobs["last_autovacuum"]
                               else "none yet")
                    print(f"  t={now - t0:5.0f}s depth {snap['queued']:,} queued {snap['leased']} leased;"
                          f" {rate:,.0f} jobs/s done; enqueue-to-start p50 {p50:.1f} p99 {p99:.1f} ms"
                          f" ({n:,} jobs); jobs {mib(jobs['total'])} MiB (heap {mib(jobs['heap'])}),"
                          f" live {jobs['live']:,} dead {jobs['dead']:,}, autovacuums"
                          f" {jobs['autovacuums']} ({last_av})", flush=True)
                    print(f"           job_attempts {mib(att['total'])} MiB, live {att['live']:,} dead"
                          f" {att['dead']:,}, autovacuums {att['autovacuums']}; indexes (MiB): "
                          + ", ".join(f"{name} {mib(size)}" for name, size in snap["indexes"].items())
                          + f"; purged so far {purged:,}", flush=True)
                    last_t, last_done, last_db = now, done, snap["now"]
                    if now >= end:
                        break
                    k += 1
                for p in producers:
                    p.stop_now.set()
                for p in producers:
                    p.join(10)
                sent = sum(p.sent for p in producers)
                skipped = sum(p.skipped for p in producers)
                deadline = time.monotonic() + 60
                while True:
                    snap = snapshot(conn, schema)
                    if snap["queued"] + snap["leased"] == 0 or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
                after = snapshot(conn, schema)
        finally:
            for p in producers:
                p.stop_now.set()
                p.go.set()
            code = bench.stop_master(master)

        print()
        print(f"sent {sent:,} jobs in {args.minutes:g} min ({sent / (args.minutes * 60):,.0f}/s);"
              f" ticks skipped (producer behind): {skipped:,}; left queued at the end:"
              f" {after['queued']:,}; master exit code {code}")
        print_table(["t s", "queued", "leased", "done/s", "start p50 ms", "start p99 ms",
                     "jobs MiB", "attempts MiB", "jobs live", "jobs dead", "jobs autovac",
                     "attempts dead", "purged"], reports, digits=1)
        print("\nsizes before and after (MiB):")
        rows = []
        for table in TABLES:
            rows.append([f"{table} (total)", mib(before["tables"][table]["total"]),
                         mib(after["tables"][table]["total"])])
            rows.append([f"{table} (heap)", mib(before["tables"][table]["heap"]),
                         mib(after["tables"][table]["heap"])])
        for name in after["indexes"]:
            rows.append([f"  {name}", mib(before["indexes"].get(name, 0)), mib(after["indexes"][name])])
        print_table(["relation", "before", "after"], rows)
        half = len(dead_series) // 2 or 1
        first = max((d[1] for d in dead_series[:half]), default=0)
        second = max((d[1] for d in dead_series[half:]), default=0)
        trough = min((d[1] for d in dead_series[half:]), default=0)
        autovacs = after["tables"]["jobs"]["autovacuums"] - before["tables"]["jobs"]["autovacuums"]
        mid_total = float(reports[half - 1][6]) if reports else 0.0
        end_total = float(reports[-1][6]) if reports else 0.0
        purged = reports[-1][-1] if reports else 0
        # Kept up: in the second half, dead tuples fall back to (near) zero after an autovacuum
        # (their trough is small next to the live rows), and once the purge runs the table
        # stops growing. The peak itself may rise when the purge starts (each purged job is
        # one more dead tuple): that is more work, not vacuum falling behind.
        kept_up = autovacs > 0 and trough <= max(5000, 0.05 * after["tables"]["jobs"]["live"])
        print(f"\njobs dead tuples: peak {first:,} in the first half, {second:,} in the second, lowest"
              f" {trough:,} in the second half; {autovacs} autovacuums of jobs,"
              f" {after['tables']['job_attempts']['autovacuums']} of job_attempts; the purge deleted"
              f" {purged:,} jobs; jobs total size {mid_total:.2f} MiB at mid-run, {end_total:.2f} MiB"
              f" at the end")
        print("autovacuum kept up (dead tuples bounded): " + ("YES" if kept_up else "NO") +
              " (bound: at least one autovacuum, and in the second half the dead tuples fall back"
              " to at most max(5,000, 5 % of live rows) after a pass)")
        for line in master.problems[:10]:
            print(f"  ! {line}")
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


if __name__ == "__main__":
    run_main(main)
