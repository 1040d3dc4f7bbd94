"""`jobrun web` as a real subprocess on a free loopback port, for tests and benchmarks."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

import httpx

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

    def start(self, timeout: float = 60.0) -> "WebProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "jobrun", "web", *self.args],
                                     env=self.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        wait_for(self._healthy, timeout=timeout, interval=0.05, message="jobrun web /healthz")
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"jobrun web exited {self.proc.returncode}: {self.proc.stdout.read()}")
        try:
            return httpx.get(self.base + "/api/v1/healthz", timeout=2).status_code == 200
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
