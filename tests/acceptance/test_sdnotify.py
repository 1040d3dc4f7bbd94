"""sd_notify from a real master subprocess, with a datagram socket standing in for systemd."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess, title


class FakeSystemd:
    """A bound AF_UNIX datagram socket (abstract name) that records every message."""

    def __init__(self) -> None:
        self.name = f"@jobrun-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name[1:])
        self.messages: list[tuple[float, dict[str, str]]] = []
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._recv, daemon=True)
        self._thread.start()

    def _recv(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self.lock:
                self.messages.append((time.monotonic(), fields))

    def having(self, key: str, value: str | None = None, after: int = 0) -> list[dict[str, str]]:
        with self.lock:
            return [f for _, f in self.messages[after:]
                    if key in f and (value is None or f[key] == value)]

    def count(self) -> int:
        with self.lock:
            return len(self.messages)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def systemd():
    fake = FakeSystemd()
    yield fake
    fake.close()


def test_ready_watchdog_reload_stop(db_env, tmp_path, systemd):
    env = dict(db_env, NOTIFY_SOCKET=systemd.name, WATCHDOG_USEC="1000000")
    with MasterProcess(env, tmp_path, "-c", "2") as m:
        seen_at_ready: list[int] = []

        def ready() -> bool:
            if not m.running():
                raise AssertionError(m.stderr())
            if systemd.having("READY", "1"):
                seen_at_ready.append(len(m.idle_children()))
                return True
            return False
        wait_for(ready, timeout=30, message="READY=1")
        assert seen_at_ready[0] == 2, "READY=1 came before both children were up"
        first = systemd.having("READY", "1")[0]
        assert first["STATUS"] == "0/2 busy, 0 jobs done"
        assert first["MAINPID"] == str(m.pid)
        # The children never see the systemd variables.
        for pid in m.children():
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert b"NOTIFY_SOCKET" not in environ and b"WATCHDOG_USEC" not in environ

        wait_for(lambda: len(systemd.having("WATCHDOG", "1")) >= 3, timeout=15,
                 message="three watchdog pings")

        mark = systemd.count()
        m.signal(signal.SIGHUP)
        wait_for(lambda: systemd.having("RELOADING", "1", after=mark), timeout=15,
                 message="RELOADING=1")
        reloading = systemd.having("RELOADING", "1", after=mark)[0]
        assert abs(int(reloading["MONOTONIC_USEC"]) - time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000) < 30e6
        wait_for(lambda: systemd.having("READY", "1", after=mark), timeout=30,
                 message="READY=1 after the reload")
        assert "generation=1" in m.stderr() or "master.reload" in m.stderr()

        mark = systemd.count()
        m.signal(signal.SIGTERM)
        wait_for(lambda: systemd.having("STOPPING", "1", after=mark), timeout=15,
                 message="STOPPING=1")
        assert m.wait(30) == 0


def test_a_stopped_master_stops_pinging(db_env, tmp_path, systemd):
    env = dict(db_env, NOTIFY_SOCKET=systemd.name, WATCHDOG_USEC="600000")  # ping every 0.3 s
    with MasterProcess(env, tmp_path, "-c", "1") as m:
        wait_for(lambda: len(systemd.having("WATCHDOG", "1")) >= 2, timeout=30,
                 message="watchdog pings")
        m.signal(signal.SIGSTOP)
        try:
            wait_for(lambda: title(m.pid) and _state(m.pid) == "T", timeout=10,
                     message="the master to stop")
            mark = len(systemd.having("WATCHDOG", "1"))
            # Any ping sent before the stop has arrived by now or within a moment; after that,
            # none may arrive for several intervals.
            deadline = time.monotonic() + 3.0
            late = []
            while time.monotonic() < deadline:
                late = systemd.having("WATCHDOG", "1")[mark:]
                if len(late) > 1:
                    break
                threading.Event().wait(0.05)
            assert len(late) <= 1, f"a stopped master kept pinging: {len(late)} pings"
            stopped_count = len(systemd.having("WATCHDOG", "1"))
        finally:
            m.signal(signal.SIGCONT)
        wait_for(lambda: len(systemd.having("WATCHDOG", "1")) > stopped_count, timeout=15,
                 message="pings to resume after SIGCONT")


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def test_notify_without_socket_is_a_no_op():
    from jobrun.sdnotify import Notify

    environ = {"WATCHDOG_USEC": "1000"}
    notify = Notify.from_env(environ)
    assert not notify.enabled and notify.send(ready=1) is False
    assert environ == {}  # taken out, so children do not inherit it


def test_notify_to_a_path_socket_and_foreign_watchdog(tmp_path):
    from jobrun.sdnotify import Notify

    path = str(tmp_path / "notify.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(path)
    try:
        notify = Notify.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000",
                                  "WATCHDOG_PID": str(os.getpid() + 1)})
        assert notify.watchdog_usec == 0  # the watchdog was meant for another process
        assert notify.send(status="x y", ready=1)
        server.settimeout(5)
        assert server.recv(100) == b"STATUS=x y\nREADY=1"
        notify.close()
    finally:
        server.close()


def test_web_ready_watchdog_and_stopping(db_env, systemd):
    """`jobrun web` (systemd/jobrun-web.service, Type=notify): READY=1 once it serves, watchdog
    pings from its event loop, STOPPING=1 on SIGTERM."""
    from tests.webproc import WebProcess

    env = dict(db_env, NOTIFY_SOCKET=systemd.name, WATCHDOG_USEC="400000")  # ping every 0.2 s
    web = WebProcess(env).start()
    try:
        [ready] = wait_for(lambda: systemd.having("READY", "1"), timeout=10, message="READY=1")
        assert ready["MAINPID"] == str(web.proc.pid)
        wait_for(lambda: len(systemd.having("WATCHDOG", "1")) >= 3, timeout=10,
                 message="watchdog pings")
    finally:
        web.stop()
    assert systemd.having("STOPPING", "1")
