"""Faults between a remote worker (`jobrun worker`) and `jobrun web`: a worker frozen past its
lease, a network cut (a TCP proxy that stops forwarding), `jobrun web` restarted while the
worker polls. Nothing is lost, no attempt is finished twice, and a report under a lease the
reaper took is refused (the shared checker, tests/invariants.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

import psycopg
import pytest

import jobrun
from jobrun.policy import RetryPolicy
from jobrun.sql import for_schema
from jobrun.testing import wait_for
from jobrun.worker.reaper import reap_params
from tests import webproc
from tests.faults.proxy import HalfOpenProxy
from tests.invariants import nothing_lost, remote_attempts
from tests.webproc import WebProcess, web_env, web_schema  # noqa: F401

pytestmark = pytest.mark.acceptance
TOKEN = "fault-worker-token-0123456789"
TTL = 3.0
QUICK = RetryPolicy(0.01, 1.0, 0.01)  # the reaper's requeue: at once


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    server_file, worker_file = folder / "workers", folder / "token"
    server_file.write_text(f"{TOKEN} remote\n")
    worker_file.write_text(TOKEN + "\n")
    for path in (server_file, worker_file):
        path.chmod(0o600)
    return server_file, worker_file


@pytest.fixture(scope="module")
def env(pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        c.declare_queue("remote")
    return web_env(pg_dsn, web_schema) | {"JOBRUN_LEASE_TTL": str(TTL)}


@pytest.fixture
def client(pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        yield c


class Worker:
    def __init__(self, url: str, token_file) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBRUN_", "PG"))}
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobrun", "worker", "--url", url, "--token-file",
             str(token_file), "-A", "tests.apps.remoteapp", "--name", "faulty", "--grace", "1"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


def reap_until_queued(pg_dsn, schema, client, job_id):
    """Run the leader reaper's statement until the job's expired lease is requeued."""
    q = for_schema(schema)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        def reaped():
            conn.execute(q.reap_expired, reap_params(100, {}, QUICK))
            return client.get(job_id).status != "leased"
        wait_for(reaped, timeout=TTL + 15, interval=0.2, message="the expired lease to be reaped")


def check(pg_dsn, schema, job_id, client):
    wait_for(lambda: client.get(job_id).status == "succeeded", timeout=30, interval=0.1,
             message="the job to succeed on its next attempt")
    attempts = client.attempts(job_id)
    assert [a.outcome for a in attempts] == ["lease_expired", "succeeded"]
    assert attempts[1].lease_token == client.get(job_id).lease_token  # the late one: refused
    with psycopg.connect(pg_dsn) as conn:
        assert remote_attempts(conn, schema) == []
        assert nothing_lost(conn, schema) == []


def test_frozen_worker_late_report_is_refused(env, tokens, pg_dsn, web_schema, client, tmp_path):
    gate = str(tmp_path / "gate")
    with WebProcess(env, "--worker-token-file", str(tokens[0])) as web:
        job = client.enqueue("remote.wait_sync", gate, queue="remote").job.id
        worker = Worker(web.base, tokens[1])
        try:
            wait_for(lambda: os.path.exists(gate + ".started"), timeout=30, message="a start")
            worker.proc.send_signal(signal.SIGSTOP)  # frozen: no renewal, no report
            reap_until_queued(pg_dsn, web_schema, client, job)
            open(gate, "w").close()  # it would finish now, late
            worker.proc.send_signal(signal.SIGCONT)
            check(pg_dsn, web_schema, job, client)
            assert "remote.lease_lost" in worker.output()
        finally:
            assert worker.stop() == 0, worker.output()


def test_network_cut_past_the_lease(env, tokens, pg_dsn, web_schema, client, tmp_path,
                                    monkeypatch):
    gate = str(tmp_path / "gate")
    # Reached through the proxy's address, the server must answer to any Host: a wildcard
    # bind, which needs the admin token.
    admin = tmp_path / "admin"
    admin.write_text("admin-token-0123456789abcdef")
    admin.chmod(0o600)
    port = webproc.free_port()
    monkeypatch.setattr(webproc, "free_port", lambda: port)
    with WebProcess(env, "--worker-token-file", str(tokens[0]), "--token-file", str(admin),
                    "--bind", f"0.0.0.0:{port}") as web, \
            HalfOpenProxy(("127.0.0.1", web.port)) as proxy:
        job = client.enqueue("remote.wait_sync", gate, queue="remote").job.id
        worker = Worker(f"http://127.0.0.1:{proxy.port}", tokens[1])
        try:
            wait_for(lambda: os.path.exists(gate + ".started"), timeout=30, message="a start")
            proxy.freeze()  # every byte held, every socket open: a silent network
            reap_until_queued(pg_dsn, web_schema, client, job)
            open(gate, "w").close()  # its outcome waits behind the cut
            proxy.thaw()
            check(pg_dsn, web_schema, job, client)
        finally:
            proxy.thaw()
            assert worker.stop() == 0, worker.output()


def test_web_restarted_while_the_worker_polls(env, tokens, pg_dsn, web_schema, client,
                                              monkeypatch):
    first = WebProcess(env, "--worker-token-file", str(tokens[0])).start()
    monkeypatch.setattr(webproc, "free_port", lambda: first.port)  # the same address again
    worker = Worker(first.base, tokens[1])
    try:
        before = client.enqueue("remote.add", [1, 2], queue="remote").job.id
        wait_for(lambda: client.get(before).status == "succeeded", timeout=30, message="a run")
        first.stop()  # the worker's long poll breaks; it retries with a backoff
        during = client.enqueue("remote.add", [3, 4], queue="remote").job.id
        second = WebProcess(env, "--worker-token-file", str(tokens[0])).start()
        try:
            wait_for(lambda: client.get(during).status == "succeeded", timeout=60,
                     interval=0.1, message="the job enqueued while the server was down")
        finally:
            assert worker.stop() == 0, worker.output()
            second.stop()
    finally:
        first.stop()
        if worker.proc.poll() is None:
            worker.proc.kill()
    assert client.attempts(during)[0].result["sum"] == 7
    with psycopg.connect(pg_dsn) as conn:
        assert remote_attempts(conn, web_schema) == []
        assert nothing_lost(conn, web_schema) == []
