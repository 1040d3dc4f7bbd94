"""`jobrun web` as a real subprocess on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile

import httpx
import pytest

from jobrun.testing import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebProcess:
    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.extra = args
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.preexec = None  # run in the child before jobrun (e.g. to lower an rlimit)

    def start(self, timeout: float = 60.0, healthy: int = 200) -> "WebProcess":
        for _ in range(5):  # another process may take the free port before the server binds it
            try:
                return self._start(timeout, healthy)
            except RuntimeError as exc:
                if "address already in use" not in str(exc):
                    raise
        raise RuntimeError("no free port")

    def _start(self, timeout: float, healthy: int) -> "WebProcess":
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.args = ["--bind", f"127.0.0.1:{self.port}", *self.extra]
        # Output goes to a file: a pipe nobody reads would block a server that logs a lot.
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "jobrun", "web", *self.args],
                                     env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     text=True, preexec_fn=self.preexec)
        try:
            wait_for(lambda: self._healthy(healthy), timeout=timeout, interval=0.05,
                     message="jobrun web /healthz")
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self, status: int) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"jobrun web exited {self.proc.returncode}: {self.output()}")
        try:
            return httpx.get(self.base + "/api/v1/healthz", timeout=15).status_code == status
        except httpx.HTTPError:
            return False

    def stop(self) -> str:
        """Stop the server (SIGTERM, then wait); returns what it printed."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        return self.output()

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def __enter__(self) -> "WebProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --- fixtures: a server per test module, on its own migrated schema -------------------------
# (import them into a test module: from tests.webproc import api, web, web_schema)

def web_env(pg_dsn: str, schema: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRUN_")}
    env.update(JOBRUN_DATABASE_URL=pg_dsn, JOBRUN_SCHEMA=schema)
    return env


@pytest.fixture(scope="module")
def web_schema(pg_dsn):
    from tests.conftest import _drop_schema, _new_schema

    name = _new_schema(pg_dsn)
    yield name
    _drop_schema(pg_dsn, name)


@pytest.fixture(scope="module")
def web(pg_dsn, web_schema):
    with WebProcess(web_env(pg_dsn, web_schema)) as server:
        yield server


@pytest.fixture(scope="module")
def api(web):
    with httpx.Client(base_url=web.base + "/api/v1", timeout=30) as c:
        yield c
