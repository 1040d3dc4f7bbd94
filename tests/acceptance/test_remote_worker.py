"""The Python reference worker (`jobrun worker --url ... --token-file ... -A ...`) against a
real `jobrun web` and PostgreSQL: jobs enqueued from Python run in it, with no database
connection of its own; SIGTERM releases what it holds; a worker killed mid-job leaves a lease
the reaper's statement requeues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psycopg
import pytest

import jobrun
from jobrun.sql import for_schema
from jobrun.testing import wait_for
from jobrun.worker.reaper import reap_params
from tests.invariants import nothing_lost, remote_attempts
from tests.webproc import WebProcess, web_env, web_schema  # noqa: F401

pytestmark = pytest.mark.acceptance
TOKEN = "remote-worker-token-0123456789"
TTL = 3.0  # the server's lease TTL, short: the killed worker's lease expires soon


@pytest.fixture(scope="module")
def setup(pg_dsn, web_schema, tmp_path_factory):
    folder = tmp_path_factory.mktemp("remote")
    tokens, mine = folder / "workers", folder / "token"
    tokens.write_text(f"{TOKEN} remote\n")
    mine.write_text(TOKEN + "\n")
    for path in (tokens, mine):
        path.chmod(0o600)
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        c.declare_queue("remote")
    env = web_env(pg_dsn, web_schema) | {"JOBRUN_LEASE_TTL": str(TTL)}
    with WebProcess(env, "--worker-token-file", str(tokens)) as web:
        yield web, mine, folder


@pytest.fixture
def client(pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        yield c


def start_worker(setup, *args):
    web, token, folder = setup
    # No database in its environment: it must do everything through the server.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBRUN_", "PG"))}
    log = open(folder / f"worker-{len(os.listdir(folder))}.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "jobrun", "worker", "--url", web.base,
                             "--token-file", str(token), "-A", "tests.apps.remoteapp",
                             "--name", "py-test", *args], env=env, stdout=log,
                            stderr=subprocess.STDOUT, text=True)
    proc.log = log
    return proc


def output(proc) -> str:
    proc.log.seek(0)
    return proc.log.read()


def settled(client, ids):
    return all(client.get(i).status in ("succeeded", "dead", "cancelled") for i in ids)


def test_python_worker_runs_sync_and_async_handlers(setup, client, pg_dsn, web_schema):
    ids = [client.enqueue("remote.add", [i, i], queue="remote").job.id for i in range(20)]
    echo = client.enqueue("remote.echo", {"x": "ü"}, queue="remote").job.id
    broken = client.enqueue("remote.broken", None, queue="remote").job.id
    refused = client.enqueue("remote.refuse", None, queue="remote").job.id
    unknown = client.enqueue("remote.nobody", None, queue="remote").job.id
    overtime = client.enqueue("remote.overtime", None, queue="remote").job.id
    hostile = client.enqueue("remote.hostile", None, queue="remote").job.id
    proc = start_worker(setup, "--slots", "4")
    try:
        wait_for(lambda: settled(client, ids + [echo, broken, refused, unknown, overtime,
                                                hostile]),
                 timeout=60,
                 interval=0.1, message="the jobs to settle")
        # Beside the masters in `jobrun workers`: its address, name and credits.
        listed = subprocess.run([sys.executable, "-m", "jobrun", "workers", "--json"],
                                env=web_env(pg_dsn, web_schema), capture_output=True, text=True,
                                timeout=60)
        [row] = [w for w in json.loads(listed.stdout) if w["app"] == "py-test"]
        assert (row["host"], row["pid"], row["concurrency"]) == ("127.0.0.1", 0, 8)  # 2 x slots
        assert row["owner"].startswith("remote:py-test:")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, output(proc)
    for i, job_id in enumerate(ids):
        [attempt] = client.attempts(job_id)
        assert attempt.result["sum"] == 2 * i and attempt.worker_host.startswith("remote:py-test:")
        assert f"adding [{i}, {i}]" in attempt.log  # the handler's log line, kept
        assert attempt.result["pid"] == proc.pid
    assert client.attempts(echo)[0].result == {"echo": {"x": "ü"}, "attempt": 1}
    assert client.get(broken).status == "dead" and len(client.attempts(broken)) == 2
    assert "always broken" in client.attempts(broken)[-1].error
    assert client.get(refused).status == "dead" and len(client.attempts(refused)) == 1
    assert "unknown task" in client.attempts(unknown)[0].error
    [late] = client.attempts(overtime)
    assert (late.outcome, client.get(overtime).status) == ("timeout", "dead")
    assert "time limit (0.2 s) exceeded" in late.error
    # Text the database cannot hold is made storable, not a refused report.
    [bad] = client.attempts(hostile)
    assert bad.outcome == "failed" and "a NUL \ufffd in an error" in bad.error
    assert "a NUL \ufffd and half a pair" in bad.log
    with psycopg.connect(pg_dsn) as conn:
        assert remote_attempts(conn, web_schema) == []
        assert nothing_lost(conn, web_schema) == []
        # It said goodbye: no registry row is left.
        assert conn.execute(f'SELECT count(*) FROM "{web_schema}".workers').fetchone()[0] == 0


def test_sigterm_releases_a_running_async_job(setup, client, tmp_path):
    gate = str(tmp_path / "gate")
    job = client.enqueue("remote.wait_async", gate, queue="remote").job.id
    proc = start_worker(setup, "--slots", "2", "--grace", "0.5")
    try:
        wait_for(lambda: os.path.exists(gate + ".started"), timeout=30, message="the job to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, output(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    back = client.get(job)
    assert back.status == "queued" and back.attempts == 0  # released: the attempt given back
    assert [a.outcome for a in client.attempts(job)] == ["released"]
    open(gate, "w").close()  # the next test's worker may run it to its end
    proc = start_worker(setup)
    try:
        wait_for(lambda: client.get(job).status == "succeeded", timeout=30, message="done")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_killed_worker_lease_is_reaped(setup, client, pg_dsn, web_schema, tmp_path):
    gate = str(tmp_path / "gate")
    job = client.enqueue("remote.wait_sync", gate, queue="remote").job.id
    proc = start_worker(setup)
    try:
        wait_for(lambda: os.path.exists(gate + ".started"), timeout=30, message="the job to start")
    finally:
        proc.kill()
        proc.wait(30)
    owner = client.get(job).lease_owner
    assert owner.startswith("remote:py-test:")
    q = for_schema(web_schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        def reaped():  # the leader's reaper, one tick: its statement as it runs it
            conn.execute(q.reap_expired, reap_params(100, {}))
            return client.get(job).status == "queued"
        wait_for(reaped, timeout=TTL + 10, interval=0.2, message="the expired lease to be reaped")
    [attempt] = client.attempts(job)
    assert attempt.outcome == "lease_expired" and owner in attempt.error


def test_a_refused_registration_is_one_line(setup, tmp_path):
    web, _, _ = setup
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token-0123456789\n")
    wrong.chmod(0o600)
    done = subprocess.run([sys.executable, "-m", "jobrun", "worker", "--url", web.base,
                           "--token-file", str(wrong), "-A", "tests.apps.remoteapp"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("jobrun: error: ")
    assert "401 unauthorized" in done.stderr and "Traceback" not in done.stderr
    assert "not-the-token" not in done.stderr + done.stdout
    wrong.chmod(0o644)
    done = subprocess.run([sys.executable, "-m", "jobrun", "worker", "--url", web.base,
                           "--token-file", str(wrong), "-A", "tests.apps.remoteapp"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "readable by others" in done.stderr
