"""Failover benchmark: how long a master takes to be back at rate after a PostgreSQL failover.

A primary and a streaming replica (tests/failover.py, the harness the acceptance tests use;
``sync`` or ``async`` replication), a master ``-c 4`` given the multi-host DSN, and an
open-loop producer at ``--rate`` jobs/s (batches of ``--batch``, a fresh client after an error).
After ``--before`` seconds the primary is SIGKILLed and the replica promoted; the run goes on
for ``--after`` seconds and exits. Printed:

- promote: from the kill until the replica takes writes (pg_ctl promote, then a write check);
- first claim: from the kill until an attempt starts on the new primary;
- back at rate: from the kill until the completions over a 0.5 s window (wholly after the
  kill: 0.5 s is the floor) reach 90 % of the rate (the backlog of the outage is drained at whatever pace the master has);
- async (and sync, as a check): acknowledged enqueues lost (acknowledged minus jobs on the new
  primary) and outcomes lost, so run again (at least: the jobs succeeded on the old primary at
  the meter's last sample before the kill minus those the new primary has succeeded from
  before its promotion; the reruns themselves leave no trace there, as their first attempt's
  row went with the old primary). ``--lag S`` holds the replica back (its WAL senders stopped) for the
  last S seconds before the kill, so that async mode has something to lose.

The harness lives with the tests (it is their fixture); run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/failover.py --mode sync
    PYTHONPATH=. .venv/bin/python benchmarks/failover.py --mode async --lag 1
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

import jobrun  # noqa: E402
from benchmarks.common import MasterProc, run_main  # noqa: E402
from jobrun.records import JobSpec  # noqa: E402
from jobrun.store import migrate  # noqa: E402
from jobrun.testing import wait_for  # noqa: E402
from tests.failover import FailoverPair  # noqa: E402

SCHEMA = "bench_failover"
WINDOW = 0.5  # seconds over which the completion rate is taken


class Producer(threading.Thread):
    """Open loop: batch k is due at t0 + k * batch / rate; ``acked`` counts returned enqueues."""

    def __init__(self, dsn: str, rate: float, batch: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rate, self.batch = dsn, rate, batch
        self.acked = 0
        self.refused = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        client = None
        due = time.monotonic()
        while not self.stopped.is_set():
            try:
                if client is None:
                    client = jobrun.Client(self.dsn, schema=SCHEMA)
                client.enqueue_many([JobSpec("noop", {}) for _ in range(self.batch)],
                                    max_attempts=10)
                self.acked += self.batch
            except Exception:  # noqa: BLE001 - the failover: a fresh client, the next batch
                self.refused += 1
                if client is not None:
                    client.close()
                client = None
            due += self.batch / self.rate
            self.stopped.wait(max(0.0, due - time.monotonic()))
        if client is not None:
            client.close()


class Meter(threading.Thread):
    """Samples the count of succeeded jobs every 0.1 s: (monotonic time, count)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()
        self.query = sql.SQL("SELECT count(*) FROM {} WHERE status = 'succeeded'").format(
            sql.Identifier(SCHEMA, "jobs"))

    def run(self) -> None:
        conn = None
        while not self.stopped.wait(0.1):
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=2)
                self.samples.append((time.monotonic(), conn.execute(self.query).fetchone()[0]))
            except psycopg.Error:
                conn = None

    def back_at(self, since: float, rate: float) -> float | None:
        """The end of the first WINDOW wholly after ``since`` whose completions reached 90 % of
        ``rate`` (so WINDOW is the floor)."""
        for i, (at, count) in enumerate(self.samples):
            if at < since + WINDOW:
                continue
            for before_at, before in self.samples[:i]:
                if before_at >= at - WINDOW and before_at >= since:
                    if (count - before) / (at - before_at) >= 0.9 * rate:
                        return at
                    break
        return None


def _writable_now(dsn: str):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT now()").fetchone()[0]


def _claimed_since(dsn: str, since) -> bool:
    query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE started_at >= %s)").format(
        sql.Identifier(SCHEMA, "job_attempts"))
    with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
        return conn.execute(query, [since]).fetchone()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--rate", type=float, default=500.0, help="jobs/s (default 500)")
    parser.add_argument("--batch", type=int, default=10, help="jobs per enqueue (default 10)")
    parser.add_argument("--concurrency", "-c", type=int, default=4)
    parser.add_argument("--before", type=float, default=8.0, help="seconds before the kill")
    parser.add_argument("--after", type=float, default=15.0, help="seconds after the kill")
    parser.add_argument("--lag", type=float, default=0.0,
                        help="async only: hold the replica back for the last S s before the kill")
    args = parser.parse_args()
    if args.lag and args.mode != "async":
        parser.error("--lag needs --mode async (a sync primary would wait for its replica)")

    with FailoverPair(args.mode) as pair:
        with psycopg.connect(pair.dsn, autocommit=True) as conn:
            migrate.migrate(conn, SCHEMA)
        master = MasterProc(pair.hosts_dsn(), SCHEMA, args.concurrency).start()
        try:
            master.wait_ready()
            producer, meter = Producer(pair.dsn, args.rate, args.batch), Meter(pair.dsn)
            producer.start()
            meter.start()
            time.sleep(max(0.0, args.before - args.lag))  # steady load: a measured span
            if args.lag:
                pair.hold_replication()
                time.sleep(args.lag)
            killed = time.monotonic()
            promoted = pair.failover()
            since = _writable_now(pair.primary.dsn)
            wait_for(lambda: _claimed_since(pair.primary.dsn, since), timeout=60,
                     interval=0.02, message="a claim on the new primary")
            first_claim = time.monotonic() - killed
            time.sleep(max(0.0, killed + args.after - time.monotonic()))
            producer.stopped.set()
            producer.join(timeout=30)
            meter.stopped.set()
            meter.join(timeout=10)
            back = meter.back_at(killed, args.rate)
            before = [count for at, count in meter.samples if at < killed]
            with psycopg.connect(pair.dsn, autocommit=True) as conn:
                jobs, kept = conn.execute(sql.SQL(
                    "SELECT (SELECT count(*) FROM {jobs}), (SELECT count(*) FROM {jobs}"
                    " WHERE status = 'succeeded' AND finished_at < %s)").format(
                        jobs=sql.Identifier(SCHEMA, "jobs")), [since]).fetchone()
        finally:
            master.stop()
    print(f"failover benchmark: mode {args.mode}, master -c {args.concurrency}, producer"
          f" {args.rate:g} jobs/s in batches of {args.batch}, kill after {args.before:g} s"
          f"{f' (replica held back for the last {args.lag:g} s)' if args.lag else ''}")
    print(f"  promote              {promoted:6.2f} s")
    print(f"  first claim          {first_claim:6.2f} s after the kill")
    print(f"  back at 90 % of rate {'never' if back is None else f'{back - killed:6.2f} s'}"
          f"{'' if back is None else ' after the kill'}")
    print(f"  enqueues acknowledged {producer.acked}, batches refused {producer.refused};"
          f" lost {producer.acked - jobs}")
    print(f"  outcomes lost (those jobs run again): at least {max(0, before[-1] - kept) if before else 0}"
          f" (succeeded on the old primary at its last sample, not on the new one)")
    return 0


if __name__ == "__main__":
    run_main(main)
