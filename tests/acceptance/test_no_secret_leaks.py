"""A password in the database URL appears nowhere an operator or a scraper looks: process
titles, the master's logs, /metrics, /healthz, and the output of top, workers, stats,
config show and health; nor in the error for an unreachable server."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess, ROOT

SECRET = "Pw-9f3c1e7a-leak-canary"


def _jobrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=120)


def _titles() -> str:
    out = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            out.append(path.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
    return "\n".join(out)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.read().decode()


def test_password_never_leaks(pg_dsn, db_env, tmp_path):
    assert pg_dsn.startswith("postgresql://postgres@"), pg_dsn
    dsn = pg_dsn.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)
    env = dict(db_env, JOBRUN_DATABASE_URL=dsn)
    with MasterProcess(env, tmp_path, "-c", "2", "--metrics-addr", "127.0.0.1:0",
                       "--log-level", "debug") as m:
        m.wait_ready(concurrency=2)
        found: list[str] = []

        def bound() -> bool:
            found[:] = re.findall(r"metrics\.listening.*?addr=(127\.0\.0\.1:\d+)", m.stderr())
            return bool(found)
        wait_for(bound, timeout=20, message="the metrics address in the log")
        addr = found[0]
        assert _jobrun("enqueue", "noop", env=env).returncode == 0
        seen = {
            "titles": _titles(),
            "/metrics": _get(f"http://{addr}/metrics"),
            "/healthz": _get(f"http://{addr}/healthz"),
        }
        wait_for(lambda: "jobrun_jobs" in _get(f"http://{addr}/metrics"), timeout=20,
                 message="a job to be counted")
        health = _jobrun("health", "--addr", addr, env=env)
        assert health.returncode == 0, health.stderr
        seen["health"] = health.stdout + health.stderr
        for args in (("top", "--once"), ("workers",), ("stats",), ("config", "show"),
                     ("--json", "config", "show"), ("--json", "top")):
            done = _jobrun(*args, env=env)
            assert done.returncode == 0, (args, done.stderr)
            seen[" ".join(args)] = done.stdout + done.stderr
        assert "jobrun-master" in seen["titles"]  # the scan saw the master
        assert re.search(r"\b\d/2\b", seen["workers"]), seen["workers"]
        assert "jobrun_job_wait_seconds" in seen["/metrics"]
        m.signal(15)
        assert m.wait(30) == 0
        seen["master log"] = m.stderr()
    assert "master.ready" in seen["master log"]
    unreachable = _jobrun("--dsn", f"postgresql://app:{SECRET}@127.0.0.1:1/app", "stats", env=env)
    assert unreachable.returncode == 1 and "127.0.0.1:1" in unreachable.stderr
    seen["unreachable error"] = unreachable.stdout + unreachable.stderr
    leaked = [where for where, text in seen.items() if SECRET in text]
    assert not leaked, f"the password appeared in: {leaked}"


def test_the_scan_can_fail(tmp_path):
    """The title scan sees a process whose argv holds the canary."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", SECRET],
                            stdin=subprocess.PIPE)
    try:
        # Until the fork has exec'd, the new process shows the parent's command line.
        wait_for(lambda: SECRET in _titles(), timeout=10, interval=0.02,
                 message="the canary in a process title")
    finally:
        proc.stdin.close()
        proc.wait(10)
