"""The embedded PostgreSQL after a user is SIGKILLed: the last live user still stops it, and
`jobrun embedded status|stop` show and stop it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import sys
from pathlib import Path

import psutil
import pytest

from jobrun.testing import wait_for
from tests.masterproc import ROOT

HOLD = ("import sys; from pathlib import Path; from jobrun.store.embedded import ensure_server;"
        "ensure_server(Path(sys.argv[1])); print('up', flush=True); sys.stdin.read()")


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRUN_")}
    return dict(env, JOBRUN_STATE_DIR=str(state), PYTHONPATH=str(ROOT))


def _jobrun(state: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True, text=True,
                          env=_env(state), cwd=ROOT, timeout=180)


def _holder(state: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(state)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=_env(state), cwd=ROOT)
    assert proc.stdout.readline().strip() == "up"
    return proc


def _status(state: Path) -> dict:
    done = _jobrun(state, "embedded", "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def state():
    # Not under pytest's tmp_path: any pytest starting meanwhile (on a shared machine) sets
    # /tmp/pytest-of-<user> back to 0700, and the server's own user loses its way in.
    root = Path(tempfile.mkdtemp(prefix="jobrun-embedded-"))
    yield root / "state"
    _jobrun(root / "state", "embedded", "stop", "--force")
    shutil.rmtree(root, ignore_errors=True)


def test_last_live_user_stops_the_server_after_a_sigkill(state):
    killed = _holder(state)
    server = _status(state)
    assert server["running"] and server["users"] == [killed.pid]
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    st = _status(state)
    assert st["running"] and st["stale"] == [killed.pid] and st["users"] == []
    # A later user joins and leaves: it was the last live one, so the server stops.
    done = _jobrun(state, "stats")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: _gone(server["pid"]), timeout=30, message="the embedded server to stop")
    st = _status(state)
    assert not st["running"] and st["stale"] == [] and st["users"] == []


def test_a_stale_user_left_behind_by_an_older_jobrun_is_pruned_at_exit(state):
    """A user SIGKILLed while another is still running does not keep the server up."""
    alive = _holder(state)
    killed = _holder(state)
    pid = _status(state)["pid"]
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    alive.stdin.close()  # the last live user exits normally
    alive.wait(60)
    wait_for(lambda: _gone(pid), timeout=30, message="the embedded server to stop")


def test_status_and_stop(state):
    assert "no embedded PostgreSQL" in _jobrun(state, "embedded", "status").stdout
    holder = _holder(state)
    try:
        text = _jobrun(state, "embedded", "status").stdout
        assert "running, pid" in text and str(holder.pid) in text
        refused = _jobrun(state, "embedded", "stop")
        assert refused.returncode == 1 and str(holder.pid) in refused.stderr
        assert _status(state)["running"]
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    pid = _status(state)["pid"]
    stopped = _jobrun(state, "embedded", "stop")
    assert stopped.returncode == 0 and f"stopped (pid {pid})" in stopped.stdout
    assert _gone(pid)
    assert not _status(state)["running"]
    assert "not running" in _jobrun(state, "embedded", "stop").stdout
