"""Seeded fault injection: real masters under load, real SIGKILL/SIGSTOP, a PostgreSQL that is
restarted or has its sessions terminated, a connection that goes half-open, four masters on one
database. After each run the one shared checker (tests/invariants.py) proves nothing was lost,
nothing started more than max_attempts times, transactional effects happened exactly once, and
no lease stayed stuck.

Every choice (fault kind, victim, moment, the job mix) comes from ``random.Random(seed)``; the
seed is printed at the start and named in every failure: ``JOBRUN_FAULT_SEED=<seed>`` replays
it. ``pytest -m soak`` runs the long variant (tests/acceptance/test_faults_soak.py).
"""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest
from psycopg import sql

import jobrun
from jobrun.policy import heartbeat_period
from jobrun.store import migrate
from jobrun.testing import Cluster, wait_for
from tests.faults.backends import KINDS, backends, terminate
from tests.faults.load import (REAPER_PERIOD, RESTARTABLE, TTL, Fleet, enqueue, finished,
                               own_connection, prepare, restart_immediate, socket_path)
from tests.faults.proxy import HalfOpenProxy
from tests.faults.seed import Faults
from tests.invariants import after_faults, violations
from tests.masterproc import live, title


@pytest.fixture
def faults(request):
    return Faults.from_environment(request.node.name)


@pytest.fixture
def conn(pg_dsn, schema):
    with own_connection(pg_dsn) as c:
        prepare(c, schema)
        yield c


def inject(conn, schema, faults: Faults, actions: dict, count: int, more=None) -> None:
    """``count`` faults, each of a kind the seed picks from ``actions`` (a kind listed twice is
    twice as likely), at a random moment after the jobs made progress since the last one.
    ``more()`` adds load before each fault."""
    for _ in range(count):
        if more is not None:
            more()
        done = finished(conn, schema)
        wait_for(lambda: finished(conn, schema) > done or not unsettled(conn, schema),
                 timeout=30, message="progress between faults")
        faults.pause(0.0, 0.4)
        actions[faults.pick(list(actions))]()


def unsettled(conn, schema) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE status IN ('queued', 'leased')")
    return conn.execute(query.format(sql.Identifier(schema, "jobs"))).fetchone()[0]


def conclude(conn, schema, faults: Faults, fleet: Fleet | None = None, settle: float = 60.0,
             intended=("succeeded", "dead")):
    outcome = after_faults(conn, schema, ttl=TTL, reaper_period=REAPER_PERIOD, settle=settle,
                           intended=intended, enqueued=faults.enqueued)
    print(f"figures: {outcome.figures}; faults: {dict(faults.counts)}")
    if outcome.violations and fleet is not None:
        print(fleet.stderr()[-20000:])
    assert outcome.violations == [], faults.explain(f"violations: {outcome.violations[:20]}")
    return outcome


# --- the checker can fail --------------------------------------------------------------------

def test_checker_reports_fabricated_violations(conn, schema, client):
    """Each rule of the checker, fed a database that breaks it, names the job that does."""
    client.set_events_mode("none")  # the rows below are written by hand, not lived
    ids = {name: client.enqueue(task, {}, max_attempts=2).job.id for name, task in [
        ("effect_twice", "effect"), ("started_thrice", "record"), ("stuck", "record"),
        ("dead_silent", "record"), ("queued", "record"), ("unrecorded", "record"),
        ("same_token", "record"), ("fine", "record"), ("fine_dead", "record"),
        ("released_silent", "record")]}

    def run(text, params=()):
        conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params)

    settled = [v for k, v in ids.items() if k not in ("stuck", "queued")]
    run("UPDATE {s}.jobs SET status = 'succeeded', attempts = 1 WHERE id = ANY(%s)", (settled,))
    run("UPDATE {s}.jobs SET status = 'dead', attempts = 2 WHERE id = ANY(%s)",
        ([ids["dead_silent"], ids["fine_dead"]],))
    run("INSERT INTO {s}.job_attempts (job_id, lease_token, attempt, outcome, error)"
        " VALUES (%s, 2, 2, 'lease_expired', 'lease expired')", (ids["fine_dead"],))
    run("INSERT INTO {s}.job_attempts (job_id, lease_token, attempt, outcome)"
        " VALUES (%s, 1, 1, 'released')", (ids["released_silent"],))
    run("UPDATE {s}.jobs SET status = 'leased', attempts = 1, lease_owner = 'gone',"
        " lease_expires_at = now() - interval '1 hour' WHERE id = %s", (ids["stuck"],))
    run("INSERT INTO {s}.processed_effects (task, effect_key, job_id) VALUES ('effect', %s, %s)",
        (str(ids["effect_twice"]), ids["effect_twice"]))
    run("INSERT INTO {s}.effects (job_id, pid) VALUES (%s, 1), (%s, 2)",
        (ids["effect_twice"], ids["effect_twice"]))
    starts = ([(ids[k], 1) for k in ("effect_twice", "fine", "fine_dead", "dead_silent")]
              + [(ids["started_thrice"], t) for t in (1, 2, 3)]
              + [(ids["same_token"], 1), (ids["same_token"], 1)])
    for job_id, token in starts:
        run("INSERT INTO {s}.starts (start_id, job_id, attempt, token, pid)"
            " VALUES (gen_random_uuid(), %s, 1, %s, 1)", (job_id, token))

    found = set(violations(conn, schema, slack=1.0, intended=("succeeded", "dead"),
                           enqueued=[*ids.values(), 10**9]))
    assert found == {
        ("effect rows not once", ids["effect_twice"]),
        ("recorded starts beyond max_attempts", ids["started_thrice"]),
        ("lease stuck", ids["stuck"]),
        ("lost (leased)", ids["stuck"]),
        ("dead without a reason", ids["dead_silent"]),
        ("lost (queued)", ids["queued"]),
        ("succeeded without a recorded start", ids["unrecorded"]),
        ("two starts under one lease token", ids["same_token"]),
        ("released without a reason", ids["released_silent"]),
        ("succeeded without a recorded start", ids["released_silent"]),
        ("lost (missing)", 10**9),
    }
    # The waits turn into violations too (after a deadline), rather than a bare timeout.
    outcome = after_faults(conn, schema, ttl=0.1, reaper_period=0.1, settle=0.2, slack=0.1,
                           intended=("succeeded", "dead"))
    problems = {p for p, _ in outcome.violations}
    assert {"lease stuck past TTL + reaper period", "never settled"} <= problems
    assert outcome.losses() == 2
    assert outcome.figures["duplicates"] == 3  # started_thrice 2, same_token 1


# --- processes killed -----------------------------------------------------------------------

def test_sigkill_children_and_masters_under_load(db_env, tmp_path, pg_dsn, schema, client, conn,
                                                 faults):
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        fleet.start_many(2, ready=2)
        enqueue(client, faults, 12)
        inject(conn, schema, faults,
               {"child": fleet.kill_child, "child2": fleet.kill_child,
                "master": fleet.kill_master}, count=4,
               more=lambda: enqueue(client, faults, 4))
        assert faults.counts["sigkill_child"] + faults.counts["sigkill_master"] >= 2, faults.explain()
        conclude(conn, schema, faults, fleet)


def test_sigkill_children_and_masters_with_slots(db_env, tmp_path, pg_dsn, schema, client, conn,
                                                faults):
    """The same with --slots: children running several jobs each (async and thread-safe ones
    beside each other, transactional ones alone) killed, and masters killed, under load."""
    plain = ("record", "record.async", "record.thread")
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", "--slots", "4",
                       record_dsn=pg_dsn) as fleet:
        fleet.start_many(2, ready=2)
        enqueue(client, faults, 20, transactional=0.2, plain=plain)
        inject(conn, schema, faults,
               {"child": fleet.kill_child, "child2": fleet.kill_child,
                "master": fleet.kill_master}, count=4,
               more=lambda: enqueue(client, faults, 8, transactional=0.2, plain=plain))
        assert faults.counts["sigkill_child"] + faults.counts["sigkill_master"] >= 2, faults.explain()
        conclude(conn, schema, faults, fleet)


def test_four_masters_on_one_database(db_env, tmp_path, pg_dsn, schema, client, conn, faults):
    with faults, Fleet(db_env, tmp_path, faults, "-c", "1", record_dsn=pg_dsn) as fleet:
        fleet.start_many(4, ready=1)
        ids = enqueue(client, faults, 16, sleep=0.2)
        inject(conn, schema, faults, {"child": fleet.kill_child, "master": fleet.kill_master},
               count=2, more=lambda: enqueue(client, faults, 5, sleep=0.2))
        outcome = conclude(conn, schema, faults, fleet)
        owners = conn.execute(sql.SQL(
            "SELECT count(DISTINCT worker_pid) FROM {} WHERE job_id = ANY(%s)").format(
            sql.Identifier(schema, "job_attempts")), [ids]).fetchone()[0]
        assert owners >= 3, faults.explain(f"only {owners} masters ran jobs: {outcome.figures}")


# --- the database's side: sessions terminated, a restart, a half-open connection -------------

def test_terminate_each_kind_of_connection(db_env, tmp_path, pg_dsn, schema, client, conn, faults):
    """pg_terminate_backend on the master's LISTEN, claim, complete, heartbeat, registry,
    reaper and elector connections and on a child's transactional connection, in the seed's
    order."""
    kinds = list(KINDS)
    faults.rng.shuffle(kinds)
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        master = fleet.start(ready=2)
        for kind in kinds:
            # The heartbeat connects and runs only at a beat that finds leases: its jobs
            # outlast a period, so one beat at least must (shorter ones may all fall between
            # two beats, and nothing else would make one).
            least = 1.5 * heartbeat_period(TTL) if kind == "heartbeat" else 0.0
            enqueue(client, faults, 6, sleep=max(0.8, least + 0.5), least=least,
                    transactional=1.0 if kind == "child" else 0.5)
            found = wait_for(lambda: backends(conn, schema).get(kind), timeout=15,
                             message=f"a {kind} connection")
            victim = faults.pick(found)
            if terminate(conn, victim):
                faults.count(f"terminate_{kind}", f"backend {victim}")
        assert set(faults.counts) == {f"terminate_{k}" for k in KINDS}, faults.explain()
        assert master.running(), faults.explain(master.stderr())
        enqueue(client, faults, 6)  # the master still claims and completes
        conclude(conn, schema, faults, fleet)
        assert master.running(), faults.explain(master.stderr())


@pytest.fixture
def private_db(db_env, tmp_path):
    """A cluster of this test's own (it may be restarted), migrated, and env/DSN for it."""
    with Cluster(bin_dir=os.environ.get("JOBRUN_TEST_PG_BIN") or None,
                 settings=RESTARTABLE) as cluster:
        name = "faults"
        with psycopg.connect(cluster.dsn, autocommit=True) as c:
            migrate.migrate(c, name)
        env = dict(db_env, JOBRUN_DATABASE_URL=cluster.dsn, JOBRUN_SCHEMA=name)
        yield cluster, env, name


def test_postgres_restart_immediate_under_load(tmp_path, private_db, faults):
    cluster, env, schema = private_db

    def wave(n):
        with jobrun.Client(cluster.dsn, schema=schema) as c:
            enqueue(c, faults, n)

    def restart():
        restart_immediate(cluster)
        faults.count("pg_restart_immediate")

    with faults, own_connection(cluster.dsn) as setup:
        prepare(setup, schema)
    with faults, Fleet(env, tmp_path, faults, "-c", "2", record_dsn=cluster.dsn) as fleet:
        fleet.start_many(2, ready=2)
        wave(12)
        for _ in range(2):
            with own_connection(cluster.dsn) as conn:
                done = finished(conn, schema)
                wait_for(lambda: finished(conn, schema) > done, timeout=30, message="progress")
            faults.pause(0.0, 0.5)
            restart()
            wave(6)
        with own_connection(cluster.dsn) as conn:
            conclude(conn, schema, faults, fleet)
        assert all(m.running() for m in fleet.masters), faults.explain(fleet.stderr())


def starts_of(conn, schema, job_id) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE job_id = %s")
    return conn.execute(query.format(sql.Identifier(schema, "starts")), [job_id]).fetchone()[0]


def hold_jobs(conn, schema, master, transactional: bool):
    """Wait until ``master`` holds leases, and (transactional) a child of it is inside an effect
    transaction: a start recorded under the token the master still holds."""
    q = sql.SQL("SELECT count(*) FROM {j} j JOIN {s} s ON s.job_id = j.id AND s.token = j.lease_token"
                " WHERE j.status = 'leased' AND j.lease_owner LIKE %s AND j.task = %s").format(
        j=sql.Identifier(schema, "jobs"), s=sql.Identifier(schema, "starts"))
    task = "effect" if transactional else "record"
    wait_for(lambda: conn.execute(q, [f"%:{master.pid}:%", task]).fetchone()[0], timeout=20,
             message=f"master {master.pid} running a {task} job")


@pytest.mark.parametrize("tasks", ["plain", "transactional"])
def test_half_open_connection_to_the_database(db_env, tmp_path, pg_dsn, schema, client, conn,
                                              faults, tasks):
    """Master A reaches PostgreSQL through a proxy that stops forwarding without closing;
    master B, connected directly, must finish every job while A stays cut off."""
    target = socket_path(pg_dsn)
    if target is None:
        pytest.skip("the half-open proxy needs the test cluster's Unix socket")
    share = 1.0 if tasks == "transactional" else 0.0
    with faults, HalfOpenProxy(target) as proxy, \
            Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        a = fleet.start(env={"JOBRUN_DATABASE_URL": proxy.dsn()}, ready=2)
        enqueue(client, faults, 8, sleep=1.0, transactional=share)
        hold_jobs(conn, schema, a, transactional=share > 0)
        proxy.freeze()
        faults.count("half_open", f"master {a.pid}")
        b = fleet.start()
        enqueue(client, faults, 4, transactional=share)
        conclude(conn, schema, faults, fleet, settle=30)
        assert a.running(), faults.explain("a cut-off master must wait for the network, not exit")
        print(f"master B {b.pid} finished the run; A {a.pid} stayed cut off")


def test_cut_off_master_fences_its_running_child(db_env, tmp_path, pg_dsn, schema, client, conn,
                                                 faults):
    """A master whose connections go half-open cannot renew its leases: it must fence (signal,
    then kill) the child running a job before the lease lapses in the database, as it does when
    its heartbeat fails outright, so the job does not run on beside its next attempt."""
    target = socket_path(pg_dsn)
    if target is None:
        pytest.skip("the half-open proxy needs the test cluster's Unix socket")
    with faults, HalfOpenProxy(target) as proxy, \
            Fleet(db_env, tmp_path, faults, "-c", "1", record_dsn=pg_dsn) as fleet:
        a = fleet.start(env={"JOBRUN_DATABASE_URL": proxy.dsn()}, ready=1)
        long_job = client.enqueue("record", {"sleep": 12}).job.id  # outlives the lease 4 times
        wait_for(lambda: starts_of(conn, schema, long_job), timeout=15, message="the job started")
        wait_for(lambda: backends(conn, schema).get("heartbeat"), timeout=10,
                 message="the master's heartbeat connection")
        faults.pause(0.0, 1.0)
        proxy.freeze()
        faults.count("half_open", f"master {a.pid}")
        frozen_at = time.monotonic()
        wait_for(lambda: "lease.fenced" in a.stderr(), timeout=TTL + 3,
                 message="the cut-off master to fence its child")
        assert time.monotonic() - frozen_at < TTL + 1, faults.explain(a.stderr())


def test_sigstop_child_past_lease_ttl(db_env, tmp_path, pg_dsn, schema, client, conn, faults):
    """A stopped child stops reporting: its master fences and kills it past the TTL, the job is
    reaped and run again; the child is continued afterwards (if it still exists)."""
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        m = fleet.start(ready=2)
        enqueue(client, faults, 8, sleep=1.0)
        busy = wait_for(lambda: [p for p in m.children() if " job=" in title(p)], timeout=15,
                        message="a busy child")
        victim = faults.pick(busy)
        os.kill(victim, signal.SIGSTOP)
        faults.count("sigstop_child", f"pid={victim}")
        try:
            wait_for(lambda: not live(victim), timeout=TTL + 10,
                     message="the stopped child to be fenced and killed")
        finally:
            if live(victim):
                os.kill(victim, signal.SIGCONT)
        enqueue(client, faults, 6)
        conclude(conn, schema, faults, fleet)
        assert "lease.fenced" in m.stderr(), faults.explain()


@pytest.mark.parametrize("tasks", ["plain", "transactional"])
def test_sigstop_master_past_lease_ttl(db_env, tmp_path, pg_dsn, schema, client, conn, faults,
                                       tasks):
    """Master A and its children are stopped past the TTL; master B must take every job over
    and finish it while A stays stopped; A is continued afterwards and must not break anything."""
    share = 1.0 if tasks == "transactional" else 0.0
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        a = fleet.start(ready=2)
        enqueue(client, faults, 8, sleep=1.0, transactional=share)
        hold_jobs(conn, schema, a, transactional=share > 0)
        frozen = [a.pid, *a.children()]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        faults.count("sigstop_master", f"pid={a.pid}")
        try:
            fleet.start()  # its children may take jobs at once: wait for master.ready only
            enqueue(client, faults, 4, transactional=share)
            conclude(conn, schema, faults, fleet, settle=30)
        finally:
            for pid in frozen:
                if live(pid):
                    os.kill(pid, signal.SIGCONT)
        # A wakes up to leases it lost: it fences the children still running them, or (those
        # that finished first) its completion is refused; either way nothing over B's outcomes.
        wait_for(lambda: "lease.fenced" in a.stderr() or "complete.refused" in a.stderr(),
                 timeout=15, message="A to notice its lost leases")
        enqueue(client, faults, 4, transactional=share)
        conclude(conn, schema, faults, fleet)
