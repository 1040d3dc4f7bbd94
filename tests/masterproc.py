"""Run ``jobrun-master`` as a real subprocess for integration tests, and look at it.

    with MasterProcess(db_env, tmp_path, "-c", "2") as m:
        m.wait_ready()
        m.children()              # live child pids (parent = the master)
        m.signal(signal.SIGTERM)
        assert m.wait() == 0
        assert "master.stopped" in m.stderr()

Teardown always SIGKILLs the whole tree (master and every child ever seen), so a failing test
leaves no process behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from jobrun.testing import wait_for

ROOT = Path(__file__).resolve().parent.parent  # the checkout: tests/ lives in it
APP = "tests.apps.taskapp"


def live(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def title(pid: int) -> str:
    """A process's title as ``ps`` shows it: its cmdline with NULs as spaces."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    return raw.replace(b"\x00", b" ").decode(errors="replace").strip()


def is_forkserver(process_title: str) -> bool:
    """Whether a process title is a fork server's: the title it sets, or its command line
    until it has (a fork server a reload launched shows that while it imports its modules)."""
    return (process_title.startswith("jobrun-forkserver")
            or " -m jobrun.child.forkserver " in f"{process_title} ")


class MasterProcess:
    def __init__(self, env: dict[str, str], tmp_path: Path, *args: str, app: str = APP,
                 python_args: tuple[str, ...] = ()) -> None:
        self.env = dict(env)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        self.env["PYTHONUNBUFFERED"] = "1"
        # Quiet defaults for tests (no purge, no metrics port that parallel runs would fight
        # over); flags in ``args`` come later and win.
        self.cmd = [sys.executable, *python_args, "-m", "jobrun.worker.cli", "-A", app,
                    "--retention", "0", "--metrics-addr", "off", *args]
        self.stderr_path = tmp_path / f"master-{time.monotonic_ns()}.stderr"
        self.proc: subprocess.Popen | None = None
        self.seen: set[int] = set()  # every child pid observed, for the no-orphans checks

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> "MasterProcess":
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err)
        return self

    def __enter__(self) -> "MasterProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill_tree()

    def kill_tree(self) -> None:
        if self.proc is None:
            return
        pids = set(self.seen)
        try:
            pids.update(c.pid for c in psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.NoSuchProcess:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        wait_for(lambda: not any(live(p) for p in pids), timeout=10, message="the tree to die")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- observation ----------------------------------------------------------------------

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def _kids(self) -> list[int]:
        """Live child processes of the master (zombies not yet reaped do not count)."""
        try:
            kids = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        pids = []
        for kid in kids:
            try:
                if kid.status() != psutil.STATUS_ZOMBIE:
                    pids.append(kid.pid)
            except psutil.NoSuchProcess:
                pass
        self.seen.update(pids)
        return sorted(pids)

    def children(self) -> list[int]:
        """Live child pids of the master that run jobs (its fork server is not one of them;
        forked or exec'd, a child's parent is the master)."""
        return [p for p in self._kids() if not is_forkserver(title(p))]

    def forkservers(self) -> list[int]:
        """Live fork server pids of the master (``--spawn fork``)."""
        return [p for p in self._kids() if is_forkserver(title(p))]

    def idle_children(self) -> list[int]:
        return [p for p in self.children() if title(p).endswith(": idle")]

    def wait_ready(self, concurrency: int | None = None, timeout: float = 20.0) -> None:
        """Wait for ``master.ready`` and, if given, ``concurrency`` idle children."""
        def ready() -> bool:
            if not self.running():
                raise AssertionError(f"master exited with {self.proc.returncode}:\n{self.stderr()}")
            return "master.ready" in self.stderr()
        wait_for(ready, timeout=timeout, message="master.ready")
        if concurrency is not None:
            wait_for(lambda: len(self.idle_children()) == concurrency, timeout=timeout,
                     message=f"{concurrency} idle children")

    def wait_children(self, n: int, timeout: float = 15.0) -> list[int]:
        """Wait until the master has exactly ``n`` live children; returns their pids."""
        found: list[int] = []

        def exactly() -> bool:
            found[:] = self.children()
            return len(found) == n
        wait_for(exactly, timeout=timeout, message=f"{n} children")
        return found


def metrics_url(master: MasterProcess) -> str:
    """The base URL of a master's metrics server (started with --metrics-addr HOST:0)."""
    found = wait_for(lambda: re.search(r"metrics\.listening addr=([\d.]+:\d+)", master.stderr()),
                     timeout=15, message="metrics.listening")
    return f"http://{found.group(1)}"


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET, error statuses included."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
