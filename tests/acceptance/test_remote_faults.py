"""Faults between remote workers (`jobrun worker`) and `jobrun web`: a worker killed mid-job, a
worker frozen past its lease (its late report refused), a network cut (a TCP proxy that stops
forwarding), `jobrun web` restarted while the workers poll. Nothing is lost, no job is finished
twice under one token, and a report under a lease the reaper took is refused (the shared
checker, tests/invariants.py, with the worker protocol's rules).

Every choice (which handler, which worker, the order of the faults and the moments they land,
the job mix) comes from ``random.Random(seed)`` (tests/faults/seed.py): the seed is printed at
the start and named in every failure; ``JOBRUN_FAULT_SEED=<seed>`` replays it. The first three
tests each land one fault and check its exact result; the last lands all four kinds, in the
seed's order, on three workers under load, and concludes with ``after_faults``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading

import psycopg
import pytest

import jobrun
from jobrun.policy import RetryPolicy
from jobrun.sql import for_schema
from jobrun.testing import wait_for
from jobrun.worker.reaper import reap_params
from tests import webproc
from tests.faults.load import own_connection
from tests.faults.proxy import HalfOpenProxy
from tests.faults.seed import Faults
from tests.invariants import after_faults, nothing_lost, remote_attempts
from tests.webproc import WebProcess, web_env, web_schema  # noqa: F401

pytestmark = pytest.mark.acceptance
TOKEN = "fault-worker-token-0123456789"
TTL = 3.0
QUICK = RetryPolicy(0.01, 1.0, 0.01)  # the reaper's requeue: at once
REAPER_PERIOD = 0.5
WAITS = ("remote.wait_sync", "remote.wait_async")  # a handler in a thread, or on the loop


@pytest.fixture
def faults(request):
    return Faults.from_environment(request.node.name)


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
    def __init__(self, url: str, token_file, name: str = "faulty", *args: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JOBRUN_", "PG"))}
        self.name = name
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobrun", "worker", "--url", url, "--token-file",
             str(token_file), "-A", "tests.apps.remoteapp", "--name", name, "--grace", "1",
             *args], env=env, stdout=self.log, stderr=subprocess.STDOUT, text=True)

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


def test_frozen_worker_late_report_is_refused(env, tokens, pg_dsn, web_schema, client, tmp_path,
                                              faults):
    gate = str(tmp_path / "gate")
    with faults, WebProcess(env, "--worker-token-file", str(tokens[0])) as web:
        job = client.enqueue(faults.pick(WAITS), gate, queue="remote").job.id
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
                                    monkeypatch, faults):
    gate = str(tmp_path / "gate")
    # Reached through the proxy's address, the server must answer to any Host: a wildcard
    # bind, which needs the admin token.
    admin = tmp_path / "admin"
    admin.write_text("admin-token-0123456789abcdef")
    admin.chmod(0o600)
    port = webproc.free_port()
    monkeypatch.setattr(webproc, "free_port", lambda: port)
    with faults, WebProcess(env, "--worker-token-file", str(tokens[0]), "--token-file",
                            str(admin), "--bind", f"0.0.0.0:{port}") as web, \
            HalfOpenProxy(("127.0.0.1", web.port)) as proxy:
        job = client.enqueue(faults.pick(WAITS), gate, queue="remote").job.id
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
                                              monkeypatch, faults):
    first = WebProcess(env, "--worker-token-file", str(tokens[0])).start()
    monkeypatch.setattr(webproc, "free_port", lambda: first.port)  # the same address again
    worker = Worker(first.base, tokens[1])
    try:
        before = client.enqueue("remote.add", [1, 2], queue="remote").job.id
        wait_for(lambda: client.get(before).status == "succeeded", timeout=30, message="a run")
        faults.pause(0.0, 1.0)  # somewhere in its long poll
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


# --- all four, seeded, under load ----------------------------------------------------------

class Reaper(threading.Thread):
    """The leader's reaper, as a master runs it: reap_expired every REAPER_PERIOD s."""

    def __init__(self, dsn: str, schema: str) -> None:
        super().__init__(name="reaper", daemon=True)
        self.dsn, self.q = dsn, for_schema(schema)
        self.halt = threading.Event()

    def run(self) -> None:
        with own_connection(self.dsn) as conn:
            while not self.halt.wait(REAPER_PERIOD):
                conn.execute(self.q.reap_expired, reap_params(100, {}, QUICK))


def held_by(conn, schema: str, names) -> set[int]:
    """The jobs leased now to the workers named ``names``."""
    return {r[0] for r in conn.execute(
        f'SELECT id FROM "{schema}".jobs WHERE status = \'leased\''
        f" AND split_part(lease_owner, ':', 2) = ANY(%s)", [list(names)])}


def still_held(conn, schema: str, jobs: set[int], names) -> bool:
    return bool(jobs & held_by(conn, schema, names))


def test_seeded_faults_on_workers_under_load(env, tokens, pg_dsn, web_schema, client, tmp_path,
                                             monkeypatch, faults):
    admin = tmp_path / "admin"
    admin.write_text("admin-token-0123456789abcdef")
    admin.chmod(0o600)
    port = webproc.free_port()
    monkeypatch.setattr(webproc, "free_port", lambda: port)  # a restart binds it again
    args = ("--worker-token-file", str(tokens[0]), "--token-file", str(admin),
            "--bind", f"0.0.0.0:{port}")
    web = WebProcess(env, *args).start()
    proxy = HalfOpenProxy(("127.0.0.1", port))
    direct, proxied = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{proxy.port}"
    workers = {"w0": Worker(direct, tokens[1], "w0", "--slots", "2"),
               "w1": Worker(proxied, tokens[1], "w1", "--slots", "2"),
               "w2": Worker(proxied, tokens[1], "w2", "--slots", "2")}
    behind = {"w1", "w2"}  # the proxy's side of a cut
    gone: set[str] = set()  # killed
    frozen: list[str] = []
    reaper = Reaper(pg_dsn, web_schema)
    reaper.start()
    conn = own_connection(pg_dsn)

    def load(n: int) -> None:
        for i in range(n):
            if faults.chance(0.5):
                job = client.enqueue("remote.nap", round(faults.uniform(0.05, 0.5), 3),
                                     queue="remote")
            else:
                job = client.enqueue("remote.add", [i, i], queue="remote")
            faults.enqueued.append(job.job.id)

    def holding(names) -> tuple[str, set[int]]:
        """A worker the seed picks among ``names`` once it holds a job (more load if need be)."""
        name = faults.pick(names)
        def busy():
            if not held_by(conn, web_schema, [name]):
                load(2)
                return False
            return True
        wait_for(busy, timeout=30, interval=0.2, message=f"{name} to hold a job")
        return name, held_by(conn, web_schema, [name])

    def kill():
        name, _ = holding(set(workers) - gone)
        workers[name].proc.send_signal(signal.SIGKILL)
        workers[name].proc.wait(10)
        gone.add(name)
        new = f"w{len(workers)}"  # a replacement, on the same side of the proxy
        url = proxied if name in behind else direct
        workers[new] = Worker(url, tokens[1], new, "--slots", "2")
        if name in behind:
            behind.add(new)
        faults.count("kill", name)

    def freeze():
        name, jobs = holding(set(workers) - gone)
        workers[name].proc.send_signal(signal.SIGSTOP)  # no renewal, no report
        wait_for(lambda: not still_held(conn, web_schema, jobs, [name]), timeout=TTL + 15,
                 interval=0.1, message=f"{name}'s leases to be reaped while it is frozen")
        faults.pause(0.0, 0.5)
        workers[name].proc.send_signal(signal.SIGCONT)  # its late outcomes: refused
        frozen.append(name)
        faults.count("freeze", name)

    def cut():
        jobs = held_by(conn, web_schema, behind - gone)
        proxy.freeze()  # every byte held, every socket open: a silent network
        try:
            if jobs:
                wait_for(lambda: not still_held(conn, web_schema, jobs, behind - gone),
                         timeout=TTL + 15, interval=0.1,
                         message="the leases behind the cut to be reaped")
            faults.pause(0.2, 1.5)
        finally:
            proxy.thaw()
        faults.count("cut", f"{len(jobs)} leases behind it")

    def restart():
        nonlocal web
        web.stop()  # the long polls and reports in flight break; the workers retry
        faults.pause(0.0, 1.0)
        web = WebProcess(env, *args).start()
        faults.count("restart")

    actions = {"kill": kill, "freeze": freeze, "cut": cut, "restart": restart}
    order = sorted(actions)
    faults.rng.shuffle(order)  # every kind once, in the seed's order, then the seed's extras
    order += [faults.pick(actions) for _ in range(faults.rng.randint(0, 2))]
    try:
        with faults:
            load(40)
            for kind in order:
                load(10)
                faults.pause(0.0, 0.5)
                actions[kind]()
            outcome = after_faults(conn, web_schema, ttl=TTL, reaper_period=REAPER_PERIOD,
                                   settle=90, intended=("succeeded", "dead"),
                                   enqueued=faults.enqueued, remote=True)
            print(f"figures: {outcome.figures}; faults: {dict(faults.counts)}")
            if outcome.violations:
                leased = conn.execute(
                    f'SELECT id, task, lease_owner, lease_token, attempts, lease_expires_at - now()'
                    f' FROM "{web_schema}".jobs WHERE status = \'leased\'').fetchall()
                print(f"leased: {leased}")
                for n, w in workers.items():
                    print(f"--- {n}:\n{w.output()[-4000:]}")
            assert outcome.violations == [], faults.explain(
                f"violations: {outcome.violations[:20]}")
            for name in frozen:  # it came back to leases it no longer held
                wait_for(lambda: "remote.lease_lost" in workers[name].output(), timeout=30,
                         interval=0.2, message=f"{name} to hear its lease was lost")
            codes = {n: w.stop() for n, w in workers.items() if n not in gone}
            for n in (n for n, code in codes.items() if code != 0):
                print(f"--- {n} exited {codes[n]}:\n{workers[n].output()[-6000:]}")
            assert set(codes.values()) == {0}, codes
    finally:
        reaper.halt.set()
        proxy.thaw()
        for w in workers.values():
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
                w.proc.kill()
        proxy.close()
        web.stop()
        conn.close()
