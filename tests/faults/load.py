"""The tables, jobs and masters of a fault run.

``prepare`` creates the append-only ``starts`` record and the ``effects`` table the handlers
of tests/apps/faultapp.py write; ``enqueue`` adds a seeded mix of plain and transactional
jobs; ``Fleet`` starts masters, kills them (and their children) at the seed's choice, starts
replacements, and tears every tree down at the end.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psycopg
from psycopg import sql

from jobrun.testing import Cluster, wait_for
from tests.faults.seed import Faults
from tests.masterproc import MasterProcess, title

APP = "tests.apps.faultapp"
TTL = 3.0
REAPER_PERIOD = 1.0  # the master's: max(0.5, min(5, ttl / 3))
FAST = ("--poll-interval", "0.1", "--lease-ttl", str(int(TTL)), "--grace", "2")


def own_connection(dsn: str) -> psycopg.Connection:
    """The test's own connection: autocommit, named so the fault injector leaves it alone."""
    return psycopg.connect(dsn, autocommit=True, application_name="faults-test")


def prepare(conn, schema: str) -> None:
    for text in ("CREATE TABLE {} (start_id uuid PRIMARY KEY, job_id bigint NOT NULL,"
                 " attempt integer NOT NULL,"
                 " token bigint NOT NULL, pid integer NOT NULL, at timestamptz NOT NULL DEFAULT"
                 " clock_timestamp())",
                 "CREATE TABLE {} (job_id bigint NOT NULL, pid integer NOT NULL)"):
        name = "starts" if "attempt" in text else "effects"
        conn.execute(sql.SQL(text).format(sql.Identifier(schema, name)))


def enqueue(client, faults: Faults, n: int, *, sleep: float = 0.3, transactional: float = 0.5,
            max_attempts=(3, 10, 10), least: float = 0.0, plain=("record",)) -> list[int]:
    """``n`` jobs: one of ``plain`` (``record``, or its async and thread-safe twins that share
    a child with --slots) or (with probability ``transactional``) ``effect``, each running
    U(least, sleep) seconds, with max_attempts drawn from ``max_attempts``; their ids also go to
    ``faults.enqueued``, the run's ledger the checker holds the table to."""
    items = []
    for _ in range(n):
        task = "effect" if faults.chance(transactional) else faults.pick(list(plain))
        items.append((task, {"sleep": round(faults.uniform(least, sleep), 3)},
                      faults.pick(max_attempts)))
    ids = [client.enqueue(task, payload, max_attempts=tries).job.id
           for task, payload, tries in items]
    faults.enqueued.extend(ids)
    return ids


def enqueue_workflows(client, faults: Faults, n: int, *, sleep: float = 0.3,
                      doomed: float = 0.2) -> list[int]:
    """``n`` workflows, each a chord of 2 to 4 ``record`` parents (one of them ``doomed``, with
    probability ``doomed``) and an ``effect`` callback, or a chain of 2 to 4 ``record`` steps
    ending in an ``effect``; their jobs' ids go to ``faults.enqueued``."""
    from jobrun import workflows as wf

    ids: list[int] = []
    for _ in range(n):
        def step(task="record"):
            return wf.Step(task, {"sleep": round(faults.uniform(0, sleep), 3)},
                           max_attempts=faults.pick((3, 10, 10)))
        members = [step() for _ in range(int(faults.uniform(2, 5)))]
        if faults.chance(doomed):
            members[0] = wf.Step("doomed")
        shape = (wf.chord(wf.group(*members), step("effect")) if faults.chance(0.5)
                 else wf.chain(*members, step("effect")))
        ids.extend(client.enqueue_workflow(shape).job_ids)
    faults.enqueued.extend(ids)
    return ids


def finished(conn, schema: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE status IN ('succeeded', 'dead', 'cancelled')")
    return conn.execute(query.format(sql.Identifier(schema, "jobs"))).fetchone()[0]


# A cluster that is restarted with -m immediate must not lose acknowledged commits (the suite's
# shared cluster runs with synchronous_commit off, which would): flushing WAL at commit is
# enough, since the machine itself does not crash.
RESTARTABLE = {"synchronous_commit": "on"}


def restart_immediate(cluster: Cluster) -> None:
    """``pg_ctl restart -m immediate`` of a private cluster: every session dies at once, with
    no shutdown checkpoint; the server comes back through crash recovery."""
    cluster._run(str(cluster._bin / "pg_ctl"), "-D", str(cluster.root / "data"),
                 "-l", str(cluster.root / "log"), "-m", "immediate", "-w", "-t", "60", "restart")


def socket_path(dsn: str) -> str | None:
    """The Unix socket file of a ``?host=/dir&port=N`` DSN (None for a TCP one)."""
    from urllib.parse import parse_qs, urlsplit
    query = parse_qs(urlsplit(dsn).query)
    host, port = query.get("host", [""])[0], query.get("port", ["5432"])[0]
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else None


SIZES = """
SELECT c.relname AS name, pg_relation_size(c.oid) AS bytes FROM pg_class c
 WHERE c.oid IN (%(jobs)s::regclass, %(attempts)s::regclass)
    OR c.oid IN (SELECT indexrelid FROM pg_index
                  WHERE indrelid IN (%(jobs)s::regclass, %(attempts)s::regclass))
 ORDER BY c.relname
"""


def relation_sizes(conn, schema: str) -> dict[str, int]:
    """pg_relation_size of jobs, job_attempts and each of their indexes."""
    rows = conn.execute(SIZES, {"jobs": f'"{schema}".jobs',
                                "attempts": f'"{schema}".job_attempts'}).fetchall()
    return dict(rows)


class Fleet:
    """The masters of one run, all on one database."""

    def __init__(self, env: dict, tmp_path: Path, faults: Faults, *args: str,
                 record_dsn: str) -> None:
        self.env = dict(env, FAULTS_RECORD_DSN=record_dsn)
        self.tmp_path = tmp_path
        self.faults = faults
        self.args = (*FAST, *args)
        self.masters: list[MasterProcess] = []

    def start(self, *extra: str, env: dict | None = None, ready: int | None = None,
              wait: bool = True) -> MasterProcess:
        m = MasterProcess(dict(self.env, **(env or {})), self.tmp_path, *self.args, *extra,
                          app=APP)
        m.fleet_env = env  # what a replacement of this master gets too
        self.masters.append(m)
        m.start()
        if wait:
            m.wait_ready(ready, timeout=30)
        return m

    def start_many(self, n: int, ready: int) -> list[MasterProcess]:
        """``n`` masters started at once, then waited for (``ready`` idle children each)."""
        started = [self.start(wait=False) for _ in range(n)]
        for m in started:
            m.wait_ready(ready, timeout=30)
        return started

    def live(self) -> list[MasterProcess]:
        return [m for m in self.masters if m.running()]

    def pick_master(self) -> MasterProcess:
        return self.faults.pick_by(self.live(), key=lambda m: m.pid)

    def kill_master(self) -> None:
        """SIGKILL a master under load (its children die with it) and start a new one."""
        victim = self.pick_master()
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        self.faults.count("sigkill_master", f"pid={victim.pid}")
        wait_for(lambda: not victim.children(), timeout=15, message="the killed master's children")
        self.start(env=victim.fleet_env, wait=False)  # it comes up while the load goes on

    def kill_child(self) -> bool:
        """SIGKILL a child running a job (waiting up to 15 s for one: a replacement master may
        still be starting), of a master and child the seed picks."""
        def busy() -> dict[int, list[int]]:
            found = {m.pid: [p for p in m.children() if " job=" in title(p) or " slots" in title(p)]
                     for m in self.live()}
            return {pid: kids for pid, kids in found.items() if kids}
        try:
            candidates = wait_for(busy, timeout=15, interval=0.05, message="a busy child")
        except TimeoutError:
            return False
        master = self.faults.pick(candidates)
        victim = self.faults.pick(candidates[master])
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.faults.count("sigkill_child", f"pid={victim} of master {master}")
        return True

    def stderr(self) -> str:
        return "\n".join(f"--- master {m.pid}\n{m.stderr()}" for m in self.masters
                         if m.stderr_path.exists())

    def close(self) -> None:
        for m in self.masters:
            for pid in [m.pid, *m.seen]:  # a stopped process must be continued to die cleanly
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            m.kill_tree()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
