"""`jobrun web` as a real subprocess on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from jobrun.testing import wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebProcess:
    def __init__(self, env: dict[str, str], *args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.args = ["--bind", f"127.0.0.1:{self.port}", *args]
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0, healthy: int = 200) -> "WebProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "jobrun", "web", *self.args],
                                     env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        wait_for(lambda: self._healthy(healthy), timeout=timeout, interval=0.05,
                 message="jobrun web /healthz")
        return self

    def _healthy(self, status: int) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"jobrun web exited {self.proc.returncode}: {self.proc.stdout.read()}")
        try:
            return httpx.get(self.base + "/api/v1/healthz", timeout=2).status_code == status
        except httpx.HTTPError:
            return False

    def stop(self) -> str:
        """Stop the server (SIGTERM, then wait); returns what it printed."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return out

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
