"""Faults a master must survive or report plainly: a child exiting with the boot-error code
after it was ready, a reload whose code fails to import, all children busy for long, an
unreachable database at start-up."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from jobrun.testing import wait_for

from tests.masterproc import APP, ROOT, metrics_url
from tests.masterproc import http_get as fetch


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} not in metrics"
    return float(found.group(1))


def test_a_ready_child_exiting_with_code_3_is_a_crash_not_a_boot_error(master, client, db):
    m = master("-c", "1", ready=1)
    job_id = client.enqueue("crash", {"how": "exit3"}, max_attempts=1).job.id
    db.wait_status(job_id)
    assert [a["outcome"] for a in db.attempts(job_id)] == ["worker_lost"]
    follow = client.enqueue("pid").job.id  # a replacement child runs it
    db.wait_status(follow)
    assert db.job(follow)["status"] == "succeeded"
    assert m.running()
    assert "app.load_failed" not in m.stderr()
    m.signal(signal.SIGTERM)
    assert m.wait(20) == 0
    err = m.stderr()
    stages = [err.index(f"teardown {n}/6: ") for n in range(1, 7)]
    assert stages == sorted(stages)  # each stage logged, in order
    last = err.strip().splitlines()[-1]
    assert "master.stopped" in last
    for count in ("claimed=2", "succeeded=1", "failed=1", "released=0"):
        assert count in last, last


def test_hup_with_code_that_fails_to_import_keeps_the_old_generation(master, client, db,
                                                                      db_env, tmp_path):
    flag = tmp_path / "broken"
    env = {**db_env, "RELOADAPP_BROKEN_IF": str(flag)}
    m = master("-c", "1", "--metrics-addr", "127.0.0.1:0", env=env, app="tests.apps.reloadapp",
               ready=1)
    url = metrics_url(m)
    [old] = m.children()
    running = client.enqueue("sleep", 1.5).job.id
    db.wait_status(running, statuses=("leased",))
    flag.touch()
    m.signal(signal.SIGHUP)
    wait_for(lambda: "reload.failed" in m.stderr(), timeout=20, message="reload.failed")
    db.wait_status(running)
    assert db.job(running)["status"] == "succeeded"
    after = client.enqueue("pid").job.id
    db.wait_status(after)
    assert db.result(after)["pid"] == old  # the old generation still serves
    assert m.running()
    text = fetch(url + "/metrics")[1]
    assert sample(text, "jobrun_reload_failures_total") == 1
    assert sample(text, "jobrun_generation") == 0
    flag.unlink()  # fixed: the next HUP loads it
    m.signal(signal.SIGHUP)
    wait_for(lambda: m.children() and old not in m.children(), timeout=20,
             message="a new generation")
    wait_for(lambda: sample(fetch(url + "/metrics")[1], "jobrun_generation") >= 1, timeout=10,
             message="the generation gauge to move")
    m.signal(signal.SIGTERM)
    assert m.wait(20) == 0


def test_healthz_stays_ok_while_every_child_is_busy(master, client, db):
    m = master("-c", "1", "--metrics-addr", "127.0.0.1:0", ready=1)
    url = metrics_url(m)
    job_id = client.enqueue("sleep", 14).job.id
    db.wait_status(job_id, statuses=("leased",))
    started = time.monotonic()
    checks = 0
    # The subject is time passing with no claim: /healthz must stay 200 throughout.
    while time.monotonic() - started < 12.5:
        status, body = fetch(url + "/healthz")
        assert status == 200, body
        checks += 1
        since = time.monotonic()
        wait_for(lambda: time.monotonic() - since > 1, timeout=5, message="the next round")
    assert checks >= 5


@pytest.mark.parametrize("url", ["postgresql://jobrun:s3cret@127.0.0.1:1/none",
                                 "postgresql://jobrun:s3cret@127.0.0.1:1/none?bogus=1"])
def test_no_migrate_with_an_unreachable_database_says_so_in_one_line(db_env, url):
    env = {**db_env, "PYTHONPATH": str(ROOT), "JOBRUN_DATABASE_URL": url}
    proc = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "-A", APP, "--no-migrate",
                           "--metrics-addr", "off"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "master.start_failed" in proc.stderr
    assert "s3cret" not in proc.stderr
