"""jobrun against its Python peers: pgqueuer, procrastinate and Celery (prefork, on Redis).

    bash benchmarks/peers/setup.sh          # once: peers from PyPI into benchmarks/.venv-peers/
    PYTHONPATH=. .venv/bin/python benchmarks/compare.py --pg-bin /usr/lib/postgresql/15/bin
    PYTHONPATH=. .venv/bin/python benchmarks/compare.py --pg-bin /usr/lib/postgresql/15/bin \\
        --repeat 1 --workloads noop,latency --systems jobrun,pgqueuer         # a quick look
    PYTHONPATH=. .venv/bin/python benchmarks/compare.py --pg-bin /usr/lib/postgresql/15/bin \\
        --workloads io,io-sync --systems jobrun,pgqueuer                      # I/O-bound jobs

One PostgreSQL cluster (fsync on) for everything; every run gets a fresh database (created,
its schema installed by the system's own tool, dropped after). Within each repeat the
systems run one after the other, alternating, so slow drifts of the shared machine's load
hit them all alike. Every worker and producer is a subprocess in a session of its own,
stopped (SIGTERM, then SIGKILL of its process group) when its run ends, on error and on ^C.

Workloads (--workloads):
  noop     drain N (default 20,000) queued noop jobs. The jobs are enqueued in bulk before
           any worker starts (the bulk-enqueue figure: jobrun Client.enqueue_many, pgqueuer
           Queries.enqueue with lists, procrastinate batch_defer_async, all in chunks of
           --chunk; Celery apply_async per job). Rate = N / (time the last completion was
           seen - the first handler start), completion as the system itself records it
           (jobrun: status succeeded; pgqueuer: queue table empty; procrastinate: status
           succeeded; Celery: a handler stamp per job, polled every 50 ms).
  cpu      the same with --cpu-jobs (default 2,000) jobs of 5 ms pure-Python CPU each.
  io       the same with --io-jobs (default 10,000) jobs whose ``async def`` handler awaits
           asyncio.sleep(--io-ms, default 100 ms): jobs that only wait, as HTTP calls do.
           jobrun runs them with --jobrun-io variants CxSLOTS (default 2x500: -c 2 --slots
           500; an async handler shares a child by default). pgqueuer runs them in one process
           with --pgqueuer-io variants PROCSxBATCH (default 1x10, its library default, and
           1x100): its per-entrypoint concurrency_limit and its max_concurrent_tasks are left
           unlimited (their defaults), so one process keeps every job it dequeued in flight,
           and batch_size (jobs a dequeue, and completions a log flush) is the knob that
           remains. procrastinate and Celery are not run (a printed note says so).
  io-sync  the same with a plain handler that calls time.sleep(--io-ms): jobrun declares it
           thread-safe (@app.task(slots=True)), so it runs on each child's thread pool.
           pgqueuer 1.x refuses plain entrypoints; its documented way for blocking code is
           ``await asyncio.to_thread(fn, job)``, run here on a default executor of
           --pgqueuer-threads threads (default 1,000, as many as jobrun's 2x500; Python's
           own default would be min(32, cores + 4)).
           The summary prints jobrun / pgqueuer (best variant of each) per drain workload.
  latency  open loop at each --rates (default 200,1000 jobs/s) for --seconds: job i is
           enqueued at t0 + i/rate by --producer-procs processes (default 1) of --producers
           threads/tasks each (one connection each, one enqueue per job; Celery: one); enqueue-to-start and enqueue-to-finish
           p50/p95/p99. The summary names, per system, the highest rate run that it
           sustained: its producers issued all but --sustain-skip (5 %) of the ticks and
           the finish p99 stayed under --sustain-ms (50 ms), by handler stamps and by the
           system's own database timestamps.

Every handler of every system runs the same body (benchmarks/peers/peerlib.py): burn the
job's CPU if any, then append a stamp line (job number, the system's job id, the producer's
time.time() just before its enqueue call, handler start, handler end) to a per-process file.
All times are time.time() on one machine: one clock for producers and handlers alike.
Latency is reported twice: from the handler stamps (same definition for every system), and
from each system's own database timestamps where it keeps them (jobrun job_attempts
started_at/finished_at; pgqueuer_log 'picked'/'successful' rows; procrastinate_events
'started'/'succeeded'), both measured from the producer's stamp. jobrun's own definition
(benchmarks/latency.py: from jobs.created_at) is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

if __package__ in (None, ""):  # run as a script: make `benchmarks.common` importable
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from jobrun.store import migrate  # noqa: E402

from benchmarks.common import (Bench, MasterProc, add_db_args, describe_code, machine, set_events_mode,  # noqa: E402
                               median, percentile, print_table)

REPO_ROOT = Path(__file__).resolve().parent.parent
PEERS = REPO_ROOT / "benchmarks" / "peers"
VENVS = REPO_ROOT / "benchmarks" / ".venv-peers"
POLL = 0.05
JOBRUN_SCHEMA = "jobrun"


# --- processes ------------------------------------------------------------------------------

_PROCS: set["Proc"] = set()



class Proc:
    """A subprocess in a session of its own; stop() ends its whole process group."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path, stdin: bool = False) -> None:
        self.cmd = cmd
        self.log_path = log
        self.log = open(log, "ab")
        self.popen = subprocess.Popen(
            cmd, env=env, cwd=str(REPO_ROOT), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdin else self.log, stderr=self.log, start_new_session=True)
        _PROCS.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 15.0) -> int | None:
        try:
            if self.popen.poll() is None:
                try:
                    os.killpg(self.popen.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            try:  # whatever of the group lingers (pool children of a dead parent)
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return self.popen.wait()
        finally:
            _PROCS.discard(self)
            self.log.close()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def stop_all() -> None:
    for p in list(_PROCS):
        try:
            p.stop(5.0)
        except Exception:
            pass


import atexit  # noqa: E402

atexit.register(stop_all)


def run_tool(cmd: list[str], env: dict[str, str], timeout: float = 600.0) -> dict[str, Any]:
    """Run a driver to completion; returns the JSON of its `RESULT ...` line (if any)."""
    out = subprocess.run(cmd, env=env, cwd=str(REPO_ROOT), capture_output=True, text=True,
                         timeout=timeout, start_new_session=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed ({out.returncode}):\n"
                           f"{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """Debian's redis-server on a free loopback port, persistence off, for Celery."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.dir = workdir / "redis"
        self.dir.mkdir()
        self.proc = Proc([shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                          "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", str(self.dir), "--protected-mode", "yes"],
                         dict(os.environ), workdir / "redis.log")
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or not self.proc.running():
                raise RuntimeError(f"redis-server did not start:\n{self.proc.tail()}")
            time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def command(self, *words: str) -> bytes:
        payload = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(payload.encode())
            return s.recv(4096)

    def flush(self) -> None:
        self.command("FLUSHALL")

    def version(self) -> str:
        out = subprocess.run([shutil.which("redis-server") or "redis-server", "--version"],
                             capture_output=True, text=True).stdout
        return out.split("v=")[1].split()[0] if "v=" in out else out.strip()

    def stop(self) -> None:
        self.proc.stop(5.0)


# --- stamps ---------------------------------------------------------------------------------

class Stamps:
    """The handlers' stamp files of one run (see peerlib.stamp)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._offsets: dict[str, int] = {}
        self._lines = 0

    def count(self) -> int:
        """Lines written so far (all keys, warm-ups included), read incrementally."""
        for entry in os.scandir(self.folder):
            start = self._offsets.get(entry.name, 0)
            size = entry.stat().st_size
            if size > start:
                with open(entry.path, "rb") as f:
                    f.seek(start)
                    chunk = f.read(size - start)
                # count whole lines only; a partial last line is re-read next time
                last = chunk.rfind(b"\n")
                if last >= 0:
                    self._lines += chunk.count(b"\n", 0, last + 1)
                    self._offsets[entry.name] = start + last + 1
        return self._lines

    def read(self) -> list[tuple[int, int, float, float, float]]:
        rows = []
        for entry in os.scandir(self.folder):
            with open(entry.path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 5:
                        rows.append((int(parts[0]), int(parts[1]), float(parts[2]),
                                     float(parts[3]), float(parts[4])))
        return rows


# --- CPU accounting -----------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_group(groups: dict[str, set[int]]) -> dict[str, float]:
    """CPU seconds so far of the live processes whose process group or parent is listed."""
    out = {k: 0.0 for k in groups}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid, ppid, pgrp = int(entry), int(fields[1]), int(fields[2])
        secs = (int(fields[11]) + int(fields[12])) / _TICK
        for name, ids in groups.items():
            if pgrp in ids or pid in ids or ppid in ids:
                out[name] += secs
                break
    return out


# --- the systems ----------------------------------------------------------------------------

class System:
    name = "?"
    label = "?"

    def __init__(self, cmp: "Compare") -> None:
        self.cmp = cmp

    def venv_python(self) -> str:
        return str(VENVS / self.name / "bin" / "python")

    def available(self) -> str | None:
        """None when usable, else why not."""
        return None if Path(self.venv_python()).exists() else (
            f"no {VENVS / self.name}: run bash benchmarks/peers/setup.sh")

    def version(self) -> str:
        out = subprocess.run([self.venv_python(), "-m", "pip", "show", self.name],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
        return "?"

    def env(self, run: "Run") -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBRUN_", "PG"))}
        paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update(PYTHONPATH=os.pathsep.join(paths), BENCH_STAMP_DIR=str(run.stamp_dir),
                   PGDSN=run.dsn, PYTHONUNBUFFERED="1")
        return env

    def driver(self) -> list[str]:
        return [self.venv_python(), str(PEERS / f"{self.name}_app.py")]

    # per run
    def install(self, run: "Run") -> None: ...
    def enqueue(self, run: "Run", n: int, task: str) -> float:
        res = run_tool(self.driver() + ["enqueue", "--n", str(n), "--task", task,
                                        "--chunk", str(self.cmp.args.chunk),
                                        "--cpu-ms", str(self.cmp.args.cpu_ms),
                                        "--io-ms", str(self.cmp.args.io_ms)], self.env(run))
        return res["seconds"]
    def start(self, run: "Run", variant: dict[str, Any]) -> list[Any]: ...
    def wait_ready(self, run: "Run", workers: list[Any]) -> None: ...
    def done(self, run: "Run", conn: psycopg.Connection, n: int) -> int: ...
    def produce_cmd(self, run: "Run", rate: float, seconds: float, producers: int) -> list[str]:
        """The open-loop producer's command; latency() appends its --slot/--slots."""
        return self.driver() + ["produce", "--rate", str(rate), "--seconds", str(seconds),
                                "--producers", str(producers), "--task", "noop"]
    def db_latency(self, run: "Run", conn: psycopg.Connection) -> dict[int, tuple[float, float]]:
        """sysid -> (db start epoch, db finish epoch) where the system records them."""
        return {}

    def stop(self, workers: list[Any]) -> None:
        for w in workers:
            try:
                w.stop()
            except Exception as exc:
                print(f"    ! stopping a {self.name} worker: {exc}", file=sys.stderr)


class Jobrun(System):
    name = "jobrun"

    def available(self) -> str | None:
        return None

    def version(self) -> str:
        import jobrun

        return f"{getattr(jobrun, '__version__', '?')} ({describe_code()})"

    def variant_label(self, v: dict[str, Any]) -> str:
        return f"jobrun -c {v['c']}" + (f" --slots {v['slots']}" if v.get("slots") else "")

    def driver(self) -> list[str]:
        return [sys.executable, str(PEERS / "jobrun_app.py")]

    def enqueue(self, run: "Run", n: int, task: str) -> float:
        res = run_tool(self.driver() + ["enqueue", "--dsn", run.dsn, "--schema", JOBRUN_SCHEMA,
                                        "--n", str(n), "--task", task, "--chunk",
                                        str(self.cmp.args.chunk), "--cpu-ms",
                                        str(self.cmp.args.cpu_ms), "--io-ms",
                                        str(self.cmp.args.io_ms)], self.env(run))
        return res["seconds"]

    def produce_cmd(self, run: "Run", rate: float, seconds: float, producers: int) -> list[str]:
        return self.driver() + ["produce", "--dsn", run.dsn, "--schema", JOBRUN_SCHEMA, "--rate",
                                str(rate), "--seconds", str(seconds), "--producers", str(producers),
                                "--client", self.cmp.args.jobrun_producer]

    def install(self, run: "Run") -> None:
        with psycopg.connect(run.dsn, autocommit=True) as conn:
            migrate.migrate(conn, JOBRUN_SCHEMA)
            set_events_mode(conn, JOBRUN_SCHEMA, self.cmp.args.events)

    def start(self, run: "Run", variant: dict[str, Any]) -> list[Any]:
        os.environ["BENCH_STAMP_DIR"] = str(run.stamp_dir)  # MasterProc copies the environment
        extra = ["--slots", str(variant["slots"])] if variant.get("slots") else []
        master = MasterProc(run.dsn, JOBRUN_SCHEMA, variant["c"], app="benchmarks.peers.jobrun_app",
                            extra=extra, verbose=self.cmp.args.verbose)
        master.start()
        return [master]

    def wait_ready(self, run: "Run", workers: list[Any]) -> None:
        workers[0].wait_ready(timeout=120)
        workers[0].wait_children_idle(timeout=120)

    def done(self, run: "Run", conn: psycopg.Connection, n: int) -> int:
        # Jobs still to do, through the partial indexes on queued and leased rows: cheap, like
        # the peers' polls of tables that shrink as they drain (a count of finished rows scans
        # the whole table and takes database CPU from the run it measures).
        return n - conn.execute("SELECT count(*) FROM jobrun.jobs WHERE status IN ('queued', 'leased')"
                                ).fetchone()[0]

    def db_latency(self, run: "Run", conn: psycopg.Connection) -> dict[int, tuple[float, float]]:
        rows = conn.execute("SELECT job_id, extract(epoch FROM started_at)::float8,"
                            " extract(epoch FROM finished_at)::float8 FROM jobrun.job_attempts"
                            " WHERE outcome = 'succeeded'").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def own_latency(self, conn: psycopg.Connection) -> tuple[list[float], list[float]]:
        """benchmarks/latency.py's definitions: from jobs.created_at (the DB clock at enqueue)."""
        rows = conn.execute(
            "SELECT extract(epoch FROM a.started_at - j.created_at)::float8 * 1000,"
            "       extract(epoch FROM a.finished_at - j.created_at)::float8 * 1000"
            "  FROM jobrun.jobs j JOIN jobrun.job_attempts a ON a.job_id = j.id"
            " WHERE (j.payload->>'i')::int >= 0").fetchall()
        return [r[0] for r in rows], [r[1] for r in rows]

    def stop(self, workers: list[Any]) -> None:
        for w in workers:
            code = w.stop()
            if code not in (0, None):
                print(f"    ! jobrun-master exited with {code}", file=sys.stderr)
            for line in w.problems[:5]:
                print(f"    ! {line}", file=sys.stderr)


class PgQueuer(System):
    name = "pgqueuer"

    def variant_label(self, v: dict[str, Any]) -> str:
        threads = f", {v['threads']} threads" if v.get("threads") else ""
        return f"pgqueuer {v['procs']}x batch {v['batch']}{threads}"

    def install(self, run: "Run") -> None:
        out = subprocess.run([str(VENVS / self.name / "bin" / "pgq"), "install"], env=self.env(run),
                             cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"pgq install failed:\n{out.stdout}\n{out.stderr}")

    def start(self, run: "Run", variant: dict[str, Any]) -> list[Any]:
        cmd = self.driver() + ["worker", "--batch-size", str(variant["batch"]),
                               "--threads", str(variant.get("threads", 0))]
        return [Proc(cmd, self.env(run), run.dir / f"pgqueuer-{k}.log") for k in range(variant["procs"])]

    def done(self, run: "Run", conn: psycopg.Connection, n: int) -> int:
        left = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        return n - left

    def db_latency(self, run: "Run", conn: psycopg.Connection) -> dict[int, tuple[float, float]]:
        rows = conn.execute(
            "SELECT job_id, extract(epoch FROM min(created) FILTER (WHERE status = 'picked'))::float8,"
            "       extract(epoch FROM min(created) FILTER (WHERE status = 'successful'))::float8"
            "  FROM pgqueuer_log GROUP BY job_id").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows if r[1] is not None and r[2] is not None}


class Procrastinate(System):
    name = "procrastinate"

    def variant_label(self, v: dict[str, Any]) -> str:
        return f"procrastinate {v['procs']}x concurrency {v['conc']}"

    def cli(self) -> list[str]:
        return [str(VENVS / self.name / "bin" / "procrastinate"), "--log-level", "warning",
                "--app", "benchmarks.peers.procrastinate_app.app"]

    def install(self, run: "Run") -> None:
        out = subprocess.run(self.cli() + ["schema", "--apply"], env=self.env(run),
                             cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"procrastinate schema --apply failed:\n{out.stdout}\n{out.stderr}")

    def start(self, run: "Run", variant: dict[str, Any]) -> list[Any]:
        return [Proc(self.cli() + ["worker", "--concurrency", str(variant["conc"]), "--wait"],
                     self.env(run), run.dir / f"procrastinate-{k}.log")
                for k in range(variant["procs"])]

    def done(self, run: "Run", conn: psycopg.Connection, n: int) -> int:
        return conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
                            ).fetchone()[0]

    def db_latency(self, run: "Run", conn: psycopg.Connection) -> dict[int, tuple[float, float]]:
        rows = conn.execute(
            "SELECT job_id, extract(epoch FROM min(at) FILTER (WHERE type = 'started'))::float8,"
            "       extract(epoch FROM min(at) FILTER (WHERE type = 'succeeded'))::float8"
            "  FROM procrastinate_events GROUP BY job_id").fetchall()
        return {r[0]: (r[1], r[2]) for r in rows if r[1] is not None and r[2] is not None}


class Celery(System):
    name = "celery"

    def available(self) -> str | None:
        if not shutil.which("redis-server"):
            return "no redis-server (apt-get install -y redis-server)"
        return super().available()

    def variant_label(self, v: dict[str, Any]) -> str:
        return f"celery prefork -c {v['c']}"

    def env(self, run: "Run") -> dict[str, str]:
        env = super().env(run)
        env["BROKER_URL"] = self.cmp.redis_url()
        return env

    def install(self, run: "Run") -> None:
        self.cmp.redis.flush()

    def start(self, run: "Run", variant: dict[str, Any]) -> list[Any]:
        cmd = [str(VENVS / self.name / "bin" / "celery"), "-A", "benchmarks.peers.celery_app",
               "worker", "-P", "prefork", "-c", str(variant["c"]), "-O", "fair",
               "--prefetch-multiplier", str(variant.get("prefetch", 4)), "--without-gossip",
               "--without-mingle", "--without-heartbeat", "-l", "warning",
               "-n", f"bench{uuid.uuid4().hex[:6]}@%h"]
        return [Proc(cmd, self.env(run), run.dir / "celery.log")]

    def done(self, run: "Run", conn: psycopg.Connection, n: int) -> int:
        return run.stamps.count() - run.warmups


SYSTEMS = {"jobrun": Jobrun, "pgqueuer": PgQueuer, "procrastinate": Procrastinate, "celery": Celery}
DRAINS = ("noop", "cpu", "io", "io-sync")  # workloads that drain a backlog


# --- one run --------------------------------------------------------------------------------

class Run:
    """A fresh database and stamp folder for one system's run."""

    def __init__(self, cmp: "Compare", system: System, tag: str) -> None:
        self.cmp = cmp
        self.system = system
        self.db = f"cmp_{system.name}_{tag}_{uuid.uuid4().hex[:6]}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"cmp-{system.name}-", dir=cmp.workdir))
        self.stamp_dir = self.dir / "stamps"
        self.stamp_dir.mkdir()
        os.chmod(self.stamp_dir, 0o777)
        self.stamps = Stamps(self.stamp_dir)
        self.warmups = 0
        with cmp.bench.connect() as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.db)))
        self.dsn = cmp.dsn_for(self.db)
        system.install(self)

    def close(self) -> None:
        try:
            with self.cmp.bench.connect() as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                    sql.Identifier(self.db)))
        finally:
            if not self.cmp.args.keep:
                shutil.rmtree(self.dir, ignore_errors=True)


class Compare:
    def __init__(self, args: argparse.Namespace, bench: Bench) -> None:
        self.args = args
        self.bench = bench
        self.workdir = Path(tempfile.mkdtemp(prefix="jobrun-compare-"))
        os.chmod(self.workdir, 0o755)
        self.redis: Redis | None = None
        self.results: list[dict[str, Any]] = []

    def redis_url(self) -> str:
        if self.redis is None:
            self.redis = Redis(self.workdir)
        return self.redis.url

    def dsn_for(self, db: str) -> str:
        parts = urlsplit(self.bench.dsn)
        if parts.scheme not in ("postgresql", "postgres"):
            raise SystemExit("compare.py needs a URL DSN (postgresql://...)")
        return urlunsplit(parts._replace(path="/" + db))

    def close(self) -> None:
        stop_all()
        if self.redis is not None:
            self.redis.stop()
        if not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def size(self, kind: str) -> int:
        """The backlog a drain workload starts from."""
        return {"noop": self.args.jobs, "cpu": self.args.cpu_jobs}.get(kind, self.args.io_jobs)

    def record(self, **fields: Any) -> dict[str, Any]:
        self.results.append(fields)
        return fields

    # -- drain ------------------------------------------------------------------------------

    def drain(self, system: System, variant: dict[str, Any], task: str, n: int, rep: int) -> dict[str, Any]:
        label = system.variant_label(variant)
        run = Run(self, system, f"{task}{rep}")
        workers: list[Any] = []
        try:
            enqueue_s = system.enqueue(run, n, task)
            if system.name == "celery":
                run.warmups = 1  # its enqueue driver sends one warm-up job first
            self.bench.pgss_reset()
            workers = system.start(run, variant)
            started = time.monotonic()
            groups = {"workers": {w.pid for w in workers}}
            pm = self.bench.postmaster_pid()
            if pm:
                groups["postgres"] = {pm}
            first_cpu = None
            first_seen = None
            with psycopg.connect(run.dsn, autocommit=True) as conn:
                while True:
                    if first_cpu is None and run.stamps.count() > 0:
                        first_cpu, first_seen = cpu_by_group(groups), time.time()
                    done = system.done(run, conn, n)
                    if done >= n:
                        t_done = time.time()
                        last_cpu = cpu_by_group(groups)
                        break
                    if not all(_alive(w) for w in workers):
                        raise RuntimeError(f"{label}: a worker exited early:\n{_tail(workers)}")
                    if time.monotonic() - started > self.args.timeout:
                        t_done = time.time()
                        last_cpu = cpu_by_group(groups)
                        print(f"    ! {label}: only {done:,} of {n:,} done after"
                              f" {self.args.timeout:g}s; rate from those", flush=True)
                        n = done
                        break
                    time.sleep(POLL)
        finally:
            system.stop(workers)
        try:
            stamps = [s for s in run.stamps.read() if s[0] >= 0]
            if not stamps:
                raise RuntimeError(f"{label}: no stamps")
            t_first = min(s[3] for s in stamps)
            span = t_done - t_first
            handler_span = max(s[4] for s in stamps) - t_first
            cores = {}
            if first_cpu is not None and first_seen is not None:
                wall = t_done - first_seen
                cores = {k: (last_cpu[k] - first_cpu.get(k, 0.0)) / wall for k in last_cpu} if wall > 0 else {}
            res = self.record(kind=task, system=system.name, variant=label, rep=rep, n=n,
                              rate=n / span, handler_rate=len(stamps) / handler_span if handler_span else None,
                              seconds=span, enqueue_s=enqueue_s, enqueue_rate=run_n(n, enqueue_s),
                              cores=cores, partial=n < self.size(task))
            print(f"  {task:<7} {label:<36} {res['rate']:8,.0f} jobs/s ({span:.2f}s for {n:,});"
                  f" bulk enqueue {res['enqueue_rate']:8,.0f} jobs/s; cores busy: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in cores.items()), flush=True)
            if self.bench.pgss and system.name != "celery":
                self.bench.pgss_report(system.name if system.name != "jobrun" else JOBRUN_SCHEMA)
            return res
        finally:
            run.close()

    # -- latency ----------------------------------------------------------------------------

    def latency(self, system: System, variant: dict[str, Any], rate: float, rep: int) -> dict[str, Any] | None:
        label = system.variant_label(variant)
        per_proc = 1 if system.name == "celery" else self.args.producers
        procs = 1 if system.name == "celery" else self.args.producer_procs
        producers = per_proc * procs  # senders in all, one warm-up job each
        run = Run(self, system, f"lat{int(rate)}_{rep}")
        workers: list[Any] = []
        started: list[Proc] = []
        try:
            workers = system.start(run, variant)
            system.wait_ready(run, workers)
            cmd = system.produce_cmd(run, rate, self.args.seconds, per_proc)
            for k in range(procs):
                started.append(Proc(cmd + ["--slot", str(k), "--slots", str(procs)], system.env(run),
                                    run.dir / f"producer-{k}.log", stdin=True))
            for producer in started:
                assert producer.popen.stdout is not None
                line = producer.popen.stdout.readline().decode()
                if not line.startswith("READY"):
                    raise RuntimeError(f"{label}: producer did not start: {line!r}\n{producer.tail()}")
            deadline = time.monotonic() + 60
            while run.stamps.count() < producers:  # the warm-up jobs ran: workers are live
                if time.monotonic() > deadline or not all(_alive(w) for w in workers):
                    raise RuntimeError(f"{label}: warm-up jobs did not run\n{_tail(workers)}")
                time.sleep(0.02)
            time.sleep(0.5)
            t0 = time.monotonic() + 0.2
            for producer in started:
                producer.popen.stdin.write(f"{t0!r}\n".encode())
                producer.popen.stdin.flush()
            result = {"sent": 0, "skipped": 0, "calls_ms": []}
            for producer in started:
                out = producer.popen.stdout.read().decode()
                producer.popen.wait()
                one = None
                for line in out.splitlines():
                    if line.startswith("RESULT "):
                        one = json.loads(line[7:])
                if one is None:
                    raise RuntimeError(f"{label}: producer failed:\n{out[-2000:]}\n{producer.tail()}")
                for key in ("sent", "skipped"):
                    result[key] += one[key]
                result["calls_ms"] += one["calls_ms"]
            ended = time.monotonic()
            sent = result["sent"]
            settle_deadline = time.monotonic() + self.args.settle
            with psycopg.connect(run.dsn, autocommit=True) as conn:
                while True:
                    finished = run.stamps.count() - producers
                    db_done = system.done(run, conn, sent + producers) if system.name != "celery" else finished
                    if finished >= sent and (system.name == "celery" or db_done >= sent + producers):
                        break
                    if time.monotonic() > settle_deadline:
                        print(f"    ! {label}: {finished:,} of {sent:,} handled {self.args.settle:g}s"
                              " after the last enqueue; figures from those", flush=True)
                        break
                    time.sleep(POLL)
                drained = time.monotonic() - ended
                time.sleep(0.3)  # let the last completion batches commit
                db_times = system.db_latency(run, conn)
                own = system.own_latency(conn) if isinstance(system, Jobrun) else None
        finally:
            for producer in started:
                producer.stop(5.0)
            system.stop(workers)
        try:
            stamps = [s for s in run.stamps.read() if s[0] >= 0]
            start_ms = [(s[3] - s[2]) * 1000 for s in stamps]
            finish_ms = [(s[4] - s[2]) * 1000 for s in stamps]
            db_start = [(db_times[s[1]][0] - s[2]) * 1000 for s in stamps if s[1] in db_times]
            db_finish = [(db_times[s[1]][1] - s[2]) * 1000 for s in stamps if s[1] in db_times]
            pct = lambda xs: [percentile(xs, p) for p in (50, 95, 99)] if xs else [None] * 3  # noqa: E731
            res = self.record(kind="latency", system=system.name, variant=label, rep=rep, rate=rate,
                              sent=sent, skipped=result["skipped"], handled=len(stamps),
                              drained_s=drained,
                              start=pct(start_ms), finish=pct(finish_ms), db_start=pct(db_start),
                              db_finish=pct(db_finish), db_n=len(db_start),
                              own_start=pct(own[0]) if own else None,
                              own_finish=pct(own[1]) if own else None,
                              call=pct(result["calls_ms"]), producers=per_proc, producer_procs=procs)
            f = lambda xs: "/".join("-" if x is None else f"{x:.1f}" for x in xs)  # noqa: E731
            print(f"  lat {int(rate):>5}/s {label:<34} handler start {f(res['start'])} finish"
                  f" {f(res['finish'])} ms (p50/p95/p99); db start {f(res['db_start'])} finish"
                  f" {f(res['db_finish'])}; sent {sent:,} skipped {result['skipped']:,} handled"
                  f" {len(stamps):,}; enqueue call p50 {res['call'][0]:.2f} ms" +
                  (f"; jobrun's own (from created_at): start {f(res['own_start'])} finish"
                   f" {f(res['own_finish'])}" if own else ""), flush=True)
            return res
        finally:
            run.close()


def run_n(n: int, seconds: float) -> float:
    return n / seconds if seconds else float("nan")


def _alive(w: Any) -> bool:
    return w.running()


def _tail(workers: list[Any]) -> str:
    out = []
    for w in workers:
        if isinstance(w, Proc):
            out.append(w.tail())
        else:
            out.append("\n".join(text for _, text in list(w.lines)[-20:]))
    return "\n".join(out)


# --- profile ----------------------------------------------------------------------------------

def profile_jobrun(cmp: Compare, c: int, seconds: float, out_dir: Path) -> None:
    """py-spy the jobrun master (and its children) while it drains a large noop backlog."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(pyspy).exists():
        print("  (py-spy not installed in this venv: pip install py-spy; no profile)")
        return
    system = Jobrun(cmp)
    run = Run(cmp, system, "profile")
    workers: list[Any] = []
    try:
        system.enqueue(run, cmp.args.profile_jobs, "noop")
        workers = system.start(run, {"c": c})
        master = workers[0]
        master.wait_ready(timeout=120)
        out_dir.mkdir(parents=True, exist_ok=True)
        raw = out_dir / "jobrun-master.collapsed.txt"
        speedscope = out_dir / "jobrun-master.speedscope.json"
        time.sleep(0.5)
        rec = subprocess.run([pyspy, "record", "--pid", str(master.pid), "--duration", str(int(seconds)),
                              "--rate", "200", "--format", "raw", "--subprocesses", "--threads", "-o", str(raw)],
                             capture_output=True, text=True, timeout=seconds + 60)
        if rec.returncode != 0:
            print(f"  py-spy failed: {rec.stderr.strip()[-500:]}")
            return
        summarize_profile(raw, master.pid)
        subprocess.run([pyspy, "record", "--pid", str(master.pid), "--duration", "3", "--rate", "200",
                        "--format", "speedscope", "-o", str(speedscope)], capture_output=True, timeout=60)
        print(f"  profiles: {raw} (collapsed stacks, master and children), {speedscope}")
    finally:
        system.stop(workers)
        run.close()


def summarize_profile(raw: Path, master_pid: int) -> None:
    """Self and inclusive sample shares of the master's functions, and the children's split."""
    per_proc: dict[str, int] = {}
    self_t: dict[str, int] = {}
    incl: dict[str, int] = {}
    total_master = 0
    for line in raw.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        try:
            count = int(count_s)
        except ValueError:
            continue
        frames = [f for f in stack.split(";")]
        procs = [f for f in frames if f.startswith("process ")]
        is_master = len(procs) == 1 and procs[0].startswith(f"process {master_pid}:")
        kind = "master" if is_master else "children"
        per_proc[kind] = per_proc.get(kind, 0) + count
        if not is_master:
            continue
        total_master += count
        funcs = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")"
                 if " (" in f else f for f in frames if not f.startswith(("process ", "thread "))]
        if funcs:
            self_t[funcs[-1]] = self_t.get(funcs[-1], 0) + count
        for fn in set(funcs):
            incl[fn] = incl.get(fn, 0) + count
    if not total_master:
        print("  (no master samples)")
        return
    print(f"  py-spy samples: {per_proc} (active samples only: idle threads are not sampled)")
    print("  master, self time (top 15):")
    for fn, cnt in sorted(self_t.items(), key=lambda kv: -kv[1])[:15]:
        print(f"    {cnt / total_master * 100:5.1f}%  {fn}")
    print("  master, inclusive time (top 25):")
    for fn, cnt in sorted(incl.items(), key=lambda kv: -kv[1])[:25]:
        print(f"    {cnt / total_master * 100:5.1f}%  {fn}")


# --- main -----------------------------------------------------------------------------------

def parse_variants(text: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """'2,4' -> [{'c': 2}, {'c': 4}]; '1x10,2x10' -> [{'procs': 1, 'batch': 10}, ...]."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            values = [int(v) for v in part.split("x")]
        except ValueError:
            values = []
        if len(values) != len(keys) or min(values) < 1:
            raise argparse.ArgumentTypeError(
                f"{part!r}: expected {'x'.join(k.upper() for k in keys)}, positive integers")
        out.append(dict(zip(keys, values)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="jobrun,pgqueuer,procrastinate,celery")
    parser.add_argument("--workloads", default="noop,cpu,latency")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=20000, help="noop drain size")
    parser.add_argument("--cpu-jobs", type=int, default=2000, help="cpu drain size")
    parser.add_argument("--cpu-ms", type=float, default=5.0)
    parser.add_argument("--io-jobs", type=int, default=10000, help="io and io-sync drain size")
    parser.add_argument("--io-ms", type=float, default=100.0, help="io, io-sync: each job's wait")
    parser.add_argument("--chunk", type=int, default=5000, help="bulk enqueue chunk")
    parser.add_argument("--rates", default="200,1000")
    parser.add_argument("--seconds", type=float, default=15.0, help="latency run length")
    parser.add_argument("--producers", type=int, default=2,
                        help="latency: senders (threads or asyncio tasks) per producer process")
    parser.add_argument("--producer-procs", type=int, default=1,
                        help="latency: producer processes, each with --producers senders")
    parser.add_argument("--jobrun-producer", choices=("sync", "async"), default="sync",
                        help="latency: jobrun's senders are threads calling Client.enqueue (sync)"
                        " or asyncio tasks calling AsyncClient.enqueue (async, as pgqueuer's)")
    parser.add_argument("--sustain-ms", type=float, default=50.0,
                        help="latency: the p99 under which a rate counts as sustained")
    parser.add_argument("--sustain-skip", type=float, default=0.05,
                        help="latency: the share of ticks the producers may skip at a sustained rate")
    parser.add_argument("--settle", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=150.0, help="give up a drain after this")
    parser.add_argument("--jobrun-c", default="4,16", help="jobrun -c values for the drains")
    parser.add_argument("--jobrun-cpu-c", default="2,4")
    parser.add_argument("--jobrun-lat-c", default="4,16", help="jobrun -c values for latency")
    parser.add_argument("--jobrun-io", default="2x500",
                        help="io, io-sync: jobrun CxSLOTS variants (2x500: -c 2 --slots 500)")
    parser.add_argument("--pgqueuer", default="1x10,2x10", help="PROCSxBATCH variants for the drains")
    parser.add_argument("--pgqueuer-io", default="1x10,1x100", help="io, io-sync: PROCSxBATCH")
    parser.add_argument("--pgqueuer-threads", type=int, default=1000,
                        help="io-sync: threads of pgqueuer's default executor (asyncio.to_thread)")
    parser.add_argument("--pgqueuer-cpu", default="1x10,2x10")
    parser.add_argument("--pgqueuer-lat", default="1x10")
    parser.add_argument("--procrastinate", default="1x10,2x10", help="PROCSxCONCURRENCY variants")
    parser.add_argument("--procrastinate-cpu", default="1x10,2x10")
    parser.add_argument("--procrastinate-lat", default="1x10")
    parser.add_argument("--celery-c", default="2,4")
    parser.add_argument("--celery-cpu-c", default="2,4")
    parser.add_argument("--celery-lat-c", default="4")
    parser.add_argument("--profile", type=Path, default=None,
                        help="py-spy the jobrun master during a noop drain; write profiles here")
    parser.add_argument("--profile-c", type=int, default=4)
    parser.add_argument("--profile-jobs", type=int, default=100000)
    parser.add_argument("--profile-seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path, default=None, help="write every result here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, stamps)")
    add_db_args(parser)
    args = parser.parse_args(argv)
    systems_wanted = [s.strip() for s in args.systems.split(",") if s.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    unknown = [n for n in systems_wanted if n not in SYSTEMS] + [
        w for w in workloads if w not in (*DRAINS, "latency")]
    if unknown:
        parser.error(f"unknown system or workload: {', '.join(unknown)}")

    try:
        variants = {
            "noop": {"jobrun": parse_variants(args.jobrun_c, ("c",)),
                     "pgqueuer": parse_variants(args.pgqueuer, ("procs", "batch")),
                     "procrastinate": parse_variants(args.procrastinate, ("procs", "conc")),
                     "celery": parse_variants(args.celery_c, ("c",))},
            "cpu": {"jobrun": parse_variants(args.jobrun_cpu_c, ("c",)),
                    "pgqueuer": parse_variants(args.pgqueuer_cpu, ("procs", "batch")),
                    "procrastinate": parse_variants(args.procrastinate_cpu, ("procs", "conc")),
                    "celery": parse_variants(args.celery_cpu_c, ("c",))},
            "latency": {"jobrun": parse_variants(args.jobrun_lat_c, ("c",)),
                        "pgqueuer": parse_variants(args.pgqueuer_lat, ("procs", "batch")),
                        "procrastinate": parse_variants(args.procrastinate_lat, ("procs", "conc")),
                        "celery": parse_variants(args.celery_lat_c, ("c",))},
            "io": {"jobrun": parse_variants(args.jobrun_io, ("c", "slots")),
                   "pgqueuer": parse_variants(args.pgqueuer_io, ("procs", "batch"))},
        }
        variants["io-sync"] = {"jobrun": variants["io"]["jobrun"],
                               "pgqueuer": [dict(v, threads=args.pgqueuer_threads)
                                            for v in variants["io"]["pgqueuer"]]}
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))

    begun = time.monotonic()
    with Bench(args) as bench:
        cmp = Compare(args, bench)
        try:
            systems: list[System] = []
            for name in systems_wanted:
                system = SYSTEMS[name](cmp)
                why = system.available()
                if why:
                    print(f"skipping {name}: {why}")
                    continue
                systems.append(system)
            print(f"compare: {', '.join(s.name for s in systems)}; workloads {', '.join(workloads)};"
                  f" {args.repeat} repeat(s), systems alternating within each")
            print(f"  {bench.describe()}; {machine()}")
            versions = {s.name: s.version() for s in systems}
            if any(s.name == "celery" for s in systems):
                cmp.redis_url()
                versions["redis-server"] = cmp.redis.version()
            print("  versions: " + "; ".join(f"{k} {v}" for k, v in versions.items()), flush=True)

            if args.profile:
                print("\n== profile: jobrun master under a noop drain (py-spy)")
                profile_jobrun(cmp, args.profile_c, args.profile_seconds, args.profile)

            for rep in range(1, args.repeat + 1):
                print(f"\n== repeat {rep} of {args.repeat}", flush=True)
                for workload in workloads:
                    if workload in DRAINS:
                        n = cmp.size(workload)
                        here = [s for s in systems if s.name in variants[workload]]
                        if rep == 1 and len(here) < len(systems):
                            print(f"  ({workload}: jobrun and pgqueuer only; not run for "
                                  + ", ".join(s.name for s in systems if s not in here) + ")")
                        # alternate: jobrun, peer, jobrun, peer... over the variant lists
                        queue = []
                        longest = max((len(variants[workload][s.name]) for s in here), default=0)
                        for k in range(longest):
                            for s in here:
                                vs = variants[workload][s.name]
                                if k < len(vs):
                                    queue.append((s, vs[k]))
                        for s, v in queue:
                            try:
                                cmp.drain(s, v, workload, n, rep)
                            except Exception as exc:
                                print(f"    ! {s.variant_label(v)} {workload}: {exc}", flush=True)
                    elif workload == "latency":
                        for rate in rates:
                            for s in systems:
                                for v in variants["latency"][s.name]:
                                    try:
                                        cmp.latency(s, v, rate, rep)
                                    except Exception as exc:
                                        print(f"    ! {s.variant_label(v)} latency {rate:g}/s: {exc}",
                                              flush=True)
                    else:
                        print(f"unknown workload {workload!r}")
            summarize(cmp, systems, args)
            if args.json:
                args.json.write_text(json.dumps({"versions": versions, "postgres": bench.describe(),
                                                 "machine": machine(), "results": cmp.results},
                                                indent=1))
        finally:
            cmp.close()
    print(f"\ntotal time {time.monotonic() - begun:.0f}s; {machine()}")
    return 0


def summarize(cmp: Compare, systems: list[System], args: argparse.Namespace) -> None:
    results = cmp.results
    print(f"\n==== summary: medians over {args.repeat} repeat(s)")
    ratios = []
    for kind in DRAINS:
        rows = [r for r in results if r["kind"] == kind]
        if not rows:
            continue
        by_variant: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_variant.setdefault(r["variant"], []).append(r)
        best_jobrun = max((median([x["rate"] for x in v]) for k, v in by_variant.items()
                           if v[0]["system"] == "jobrun"), default=None)
        table = []
        for label, runs in by_variant.items():
            rate = median([x["rate"] for x in runs])
            table.append([label, rate, min(x["rate"] for x in runs), max(x["rate"] for x in runs),
                          median([x["enqueue_rate"] for x in runs]),
                          median([x["cores"].get("workers", 0.0) for x in runs]),
                          median([x["cores"].get("postgres", 0.0) for x in runs]),
                          (best_jobrun / rate) if best_jobrun and runs[0]["system"] != "jobrun" else None,
                          "partial" if any(x["partial"] for x in runs) else ""])
        best_peer = max((median([x["rate"] for x in v]) for k, v in by_variant.items()
                         if v[0]["system"] == "pgqueuer"), default=None)
        if best_jobrun and best_peer:
            ratios.append(f"{kind} {best_jobrun / best_peer:.2f}x")
        n = cmp.size(kind)
        what = {"noop": "noop", "cpu": f"{args.cpu_ms:g} ms CPU",
                "io": f"{args.io_ms:g} ms asyncio.sleep",
                "io-sync": f"{args.io_ms:g} ms time.sleep (thread-safe plain handler)"}[kind]
        print(f"\ndrain of {n:,} {what} jobs (jobs/s; ratio = best jobrun variant / this):")
        print_table(["system", "jobs/s", "min", "max", "bulk enqueue/s", "worker cores",
                     "postgres cores", "jobrun/this", "note"], table, digits=2)
    if ratios:
        print("\njobrun / pgqueuer, best variant of each: " + "; ".join(ratios))
    lat = [r for r in results if r["kind"] == "latency"]
    if lat:
        print("\nlatency, open loop (ms, medians over repeats of each percentile; from the"
              " producer's time.time() before its enqueue call):")
        table = []
        for rate in sorted({r["rate"] for r in lat}):
            for label in dict.fromkeys(r["variant"] for r in lat if r["rate"] == rate):
                runs = [r for r in lat if r["rate"] == rate and r["variant"] == label]
                m = lambda key, i: median([x[key][i] for x in runs if x[key] and x[key][i] is not None])  # noqa: E731
                table.append([int(rate), label, m("start", 0), m("start", 2), m("finish", 0),
                              m("finish", 2), m("db_start", 2), m("db_finish", 2),
                              m("own_start", 2) if runs[0]["own_start"] else None,
                              m("own_finish", 2) if runs[0]["own_finish"] else None,
                              m("call", 0), sum(x["skipped"] for x in runs)])
        print_table(["rate", "system", "start p50", "start p99", "finish p50", "finish p99",
                     "db start p99", "db finish p99", "own start p99", "own finish p99",
                     "enqueue call p50", "skipped"], table, digits=2)
        print("  start/finish: handler stamps; db: the system's own timestamps (jobrun attempts,"
              " pgqueuer_log, procrastinate_events) minus the producer stamp; own: jobrun's"
              " latency.py definition (from jobs.created_at)")
        print_sustained(lat, args)


def sustained(runs: list[dict[str, Any]], key: str, limit_ms: float, max_skip: float,
              seconds: float) -> float | None:
    """The highest offered rate a variant sustained: its producers issued all but ``max_skip``
    of the ticks (so the arrivals did not slow down) and the median over repeats of ``key``'s
    p99 stayed under ``limit_ms``. None if no rate qualified."""
    best = None
    for rate in sorted({r["rate"] for r in runs}):
        at = [r for r in runs if r["rate"] == rate]
        p99 = [r[key][2] for r in at if r[key] and r[key][2] is not None]
        skipped = median([r["skipped"] / max(1.0, rate * seconds) for r in at])
        if p99 and median(p99) < limit_ms and skipped <= max_skip:
            best = rate
    return best


def print_sustained(lat: list[dict[str, Any]], args: argparse.Namespace) -> None:
    limit, skip = args.sustain_ms, args.sustain_skip
    print(f"\nhighest open-loop rate sustained (the producers issued at least {1 - skip:.0%} of"
          f" the ticks, and the p99 stayed under {limit:g} ms; of the rates run):")
    table = []
    system = {r["variant"]: r["system"] for r in lat}
    best = {}
    for label in system:
        runs = [r for r in lat if r["variant"] == label]
        best[label] = [sustained(runs, key, limit, skip, args.seconds)
                       for key in ("finish", "db_finish")]
    top = [max((best[l][i] or 0 for l in system if system[l] == "jobrun"), default=0) for i in (0, 1)]
    for label in system:
        row = [label]
        for i in (0, 1):
            rate = best[label][i]
            row += [rate, (top[i] / rate) if rate and top[i] and system[label] != "jobrun" else None]
        table.append(row)
    print_table(["system", "handler finish p99: rate", "jobrun/this", "db finish p99: rate",
                 "jobrun/this"], table, digits=2)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; everything started was stopped", file=sys.stderr)
        stop_all()
        sys.exit(130)
