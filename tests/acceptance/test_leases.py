"""Leases that cannot lie: fencing tokens, the heartbeater, cancel, the reaper, exactly-once.

Real masters (subprocesses), real signals (SIGSTOP/SIGCONT/SIGKILL), a real PostgreSQL, short
TTLs. Every wait is on a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.testing import wait_for
from jobrun.worker.claimer import claim_params
from jobrun.worker.reaper import reap_params
from tests.invariants import nothing_lost
from tests.masterproc import MasterProcess, title

APP = "tests.apps.leaseapp"
FAST = ("--poll-interval", "0.1", "--lease-ttl", "3", "--grace", "5")


@pytest.fixture
def conn(pg_dsn, schema):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        c.execute(sql.SQL("CREATE TABLE {} (job_id bigint NOT NULL, pid integer NOT NULL)")
                  .format(sql.Identifier(schema, "effects")))
        yield c


@contextlib.contextmanager
def started_later(master: MasterProcess):
    """Tear down a master that the test starts by hand part-way through."""
    try:
        yield master
    finally:
        master.kill_tree()


def job(conn, schema, job_id):
    return conn.execute(sql.SQL("SELECT * FROM {} WHERE id = %s").format(
        sql.Identifier(schema, "jobs")), [job_id]).fetchone()


def attempts(conn, schema, job_id):
    return conn.execute(sql.SQL("SELECT * FROM {} WHERE job_id = %s ORDER BY lease_token").format(
        sql.Identifier(schema, "job_attempts")), [job_id]).fetchall()


def effects(conn, schema, job_id):
    return conn.execute(sql.SQL("SELECT * FROM {} WHERE job_id = %s").format(
        sql.Identifier(schema, "effects")), [job_id]).fetchall()


def running_child(master: MasterProcess, job_id: int) -> int:
    """The pid of the child whose title says it runs ``job_id``."""
    found: list[int] = []

    def look() -> bool:
        found[:] = [p for p in master.children() if f" job={job_id} " in title(p) + " "]
        return bool(found)
    wait_for(look, timeout=15, message=f"a child running job {job_id}")
    return found[0]


def taken_over(conn, schema, job_id, pid) -> bool:
    """Master ``pid`` holds the job now, or already finished it (then it holds no lease)."""
    if f":{pid}:" in (job(conn, schema, job_id)["lease_owner"] or ""):
        return True
    return any(a["worker_pid"] == pid for a in attempts(conn, schema, job_id))


def settled(conn, schema, job_id, statuses=("succeeded", "dead", "cancelled")):
    row = job(conn, schema, job_id)
    return row if row["status"] in statuses else None


def test_stopped_child_is_fenced_and_job_finishes_elsewhere(db_env, tmp_path, client, conn, schema):
    with MasterProcess(db_env, tmp_path, "-c", "2", *FAST, app=APP) as m:
        m.wait_ready(concurrency=2)
        job_id = client.enqueue("effect", {"sleep_first": 30}).job.id
        stopped = running_child(m, job_id)
        os.kill(stopped, signal.SIGSTOP)
        try:
            # Its lease is no longer renewed (the child stopped reporting), so it is fenced and
            # killed, the lease lapses, the reaper requeues it and the other child finishes it.
            row = wait_for(lambda: settled(conn, schema, job_id), timeout=30, message="job settled")
        finally:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass
        assert row["status"] == "succeeded"
        outcomes = [a["outcome"] for a in attempts(conn, schema, job_id)]
        assert outcomes == ["lease_expired", "succeeded"]
        done = effects(conn, schema, job_id)
        assert len(done) == 1 and done[0]["pid"] != stopped
        wait_for(lambda: "lease.fenced" in m.stderr(), timeout=10, message="fence logged")
        wait_for(lambda: stopped not in m.children(), timeout=10, message="stopped child replaced")
        assert nothing_lost(conn, schema) == []


@contextlib.contextmanager
def stopped_then_taken_over(db_env, tmp_path, client, conn, schema, payload):
    """Master A claims an ``effect`` job; A and its child are SIGSTOPped until master B has
    taken the job over (reaped the lapsed lease and claimed it, or already finished it).
    Yields (a, b, job_id, child_a) with A still stopped (continued on the way out, if the
    test has not done so); both masters are torn down when the block ends."""
    a = MasterProcess(db_env, tmp_path, "-c", "1", *FAST, app=APP)
    b = MasterProcess(db_env, tmp_path, "-c", "1", *FAST, app=APP)  # started once A is stopped
    with a, started_later(b):
        a.wait_ready(concurrency=1)
        job_id = client.enqueue("effect", payload).job.id
        child_a = running_child(a, job_id)
        # Stop it inside the handler, after its effect row went into its open transaction.
        wait_for(lambda: conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction'"
            " AND datname = current_database()").fetchone(),
            timeout=10, message="A's child inside its transaction")
        os.kill(a.pid, signal.SIGSTOP)
        os.kill(child_a, signal.SIGSTOP)
        try:
            b.start().wait_ready(concurrency=None)
            # B's child may then wait on the effect key that A's stopped, uncommitted attempt
            # still holds.
            wait_for(lambda: taken_over(conn, schema, job_id, b.pid), timeout=30,
                     message="master B to take the job over")
            yield a, b, job_id, child_a
        finally:
            os.kill(a.pid, signal.SIGCONT)
            os.kill(child_a, signal.SIGCONT)
            # Shown by pytest only when the test fails.
            for name, master in (("A", a), ("B", b)):
                if master.stderr_path.exists():
                    print(f"--- master {name}\n{master.stderr()}")


def assert_b_did_it_once(conn, schema, job_id, b, child_a):
    row = job(conn, schema, job_id)
    assert row["status"] == "succeeded"
    rows = attempts(conn, schema, job_id)
    assert [r["outcome"] for r in rows] == ["lease_expired", "succeeded"]
    assert rows[-1]["worker_pid"] == b.pid
    done = effects(conn, schema, job_id)
    assert len(done) == 1 and done[0]["pid"] != child_a
    assert nothing_lost(conn, schema) == []


def test_stopped_master_fences_its_children_instead_of_completing(db_env, tmp_path, client, conn, schema):
    with stopped_then_taken_over(db_env, tmp_path, client, conn, schema, {"sleep_first": 60}) as (a, b, job_id, child_a):
        os.kill(a.pid, signal.SIGCONT)
        os.kill(child_a, signal.SIGCONT)
        wait_for(lambda: settled(conn, schema, job_id), timeout=30, message="job settled")
        assert_b_did_it_once(conn, schema, job_id, b, child_a)
        wait_for(lambda: "lease.fenced" in a.stderr(), timeout=10, message="A fenced its child")
        assert "lease.fenced" not in b.stderr()


def test_stale_transactional_attempt_is_refused_and_rolled_back(db_env, tmp_path, client, conn, schema):
    """A's child reaches its guarded completion after B re-claimed the job, with A's master
    (and so its heartbeater) stopped: only the completion guard stands in the way."""
    with stopped_then_taken_over(db_env, tmp_path, client, conn, schema, {"sleep_first": 4}) as (a, b, job_id, child_a):
        os.kill(child_a, signal.SIGCONT)  # A's master stays stopped: nobody fences
        wait_for(lambda: settled(conn, schema, job_id), timeout=30, message="job settled")
        assert_b_did_it_once(conn, schema, job_id, b, child_a)


def test_child_killed_after_commit_before_reporting_leaves_one_effect(db_env, tmp_path, client, conn, schema):
    with MasterProcess(db_env, tmp_path, "-c", "1", "--poll-interval", "0.1", app=APP) as m:
        m.wait_ready(concurrency=1)
        # A result far larger than a socket buffer: with the master stopped, the child commits
        # and then blocks writing its result frame, so it dies before the frame is complete.
        job_id = client.enqueue("effect", {"sleep": 0.5, "result_bytes": 4_000_000}).job.id
        child = running_child(m, job_id)
        os.kill(m.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: settled(conn, schema, job_id), timeout=20, message="child committed")
            os.kill(child, signal.SIGKILL)
        finally:
            os.kill(m.pid, signal.SIGCONT)
        wait_for(lambda: "complete.refused" in m.stderr(), timeout=15, message="refused completion")
        m.wait_children(1)
        row = job(conn, schema, job_id)
        assert row["status"] == "succeeded" and row["attempts"] == 1
        assert [a["outcome"] for a in attempts(conn, schema, job_id)] == ["succeeded"]
        assert len(effects(conn, schema, job_id)) == 1
        assert "child.lost" in m.stderr()  # the master saw the death...
        assert nothing_lost(conn, schema) == []  # ...and recorded nothing over the success


def test_heartbeat_connection_killed_reconnects_before_leases_lapse(db_env, tmp_path, client, conn, schema):
    with MasterProcess(db_env, tmp_path, "-c", "1", *FAST, app=APP) as m:
        m.wait_ready(concurrency=1)
        job_id = client.enqueue("sleepy", {"sleep": 8}).job.id
        running_child(m, job_id)
        find = ("SELECT pid FROM pg_stat_activity WHERE query LIKE %s AND pid <> pg_backend_pid()"
                " AND datname = current_database()")
        pattern = "%lease_expires_at = now() + make_interval%FROM unnest%"
        for _ in range(2):
            backend = wait_for(lambda: conn.execute(find, [pattern]).fetchone(), timeout=10,
                               message="the heartbeat backend")
            conn.execute("SELECT pg_terminate_backend(%s)", [backend["pid"]])
            wait_for(lambda: (r := conn.execute(find, [pattern]).fetchone()) and r["pid"] != backend["pid"],
                     timeout=10, message="a new heartbeat connection")
        row = wait_for(lambda: settled(conn, schema, job_id), timeout=20, message="job settled")
        assert row["status"] == "succeeded" and row["attempts"] == 1
        assert [a["outcome"] for a in attempts(conn, schema, job_id)] == ["succeeded"]
        assert "heartbeat.failed" in m.stderr() and "lease.fenced" not in m.stderr()


def test_cancel_of_running_job_interrupts_the_handler(db_env, tmp_path, client, conn, schema):
    with MasterProcess(db_env, tmp_path, "-c", "1", *FAST, app=APP) as m:
        m.wait_ready(concurrency=1)
        job_id = client.enqueue("sleepy", {"sleep": 60}).job.id
        running_child(m, job_id)
        cancelled = client.cancel(job_id)
        assert cancelled.status == "leased" and cancelled.cancel_requested
        row = wait_for(lambda: settled(conn, schema, job_id), timeout=10, message="job cancelled")
        assert row["status"] == "cancelled" and row["attempts"] == 1
        assert [a["outcome"] for a in attempts(conn, schema, job_id)] == ["cancelled"]
        m.wait_children(1)


def test_cancel_at_random_points_never_ends_both_ways(db_env, tmp_path, client, conn, schema):
    rng = random.Random(7)
    with MasterProcess(db_env, tmp_path, "-c", "2", *FAST, app=APP) as m:
        m.wait_ready(concurrency=2)
        ids = [client.enqueue("sleepy", {"sleep": rng.uniform(0, 0.4)}).job.id for _ in range(40)]
        # Cancel each after a random delay: some while queued, some just claimed, some mid-run,
        # some while their result is being recorded, some after they finished (refused).
        outcomes: dict[int, str] = {}

        def canceller() -> None:
            for job_id in ids:
                time.sleep(rng.uniform(0, 0.05))  # the random point, not synchronisation
                try:
                    outcomes[job_id] = client_b.cancel(job_id).status
                except Exception as exc:  # noqa: BLE001 - Refused: it had already finished
                    outcomes[job_id] = type(exc).__name__

        from jobrun import Client
        with Client(db_env["JOBRUN_DATABASE_URL"], schema=schema) as client_b:
            t = threading.Thread(target=canceller)
            t.start()
            t.join(timeout=60)
        assert not t.is_alive()
        wait_for(lambda: all(settled(conn, schema, i) for i in ids), timeout=60, message="all settled")
        table = sql.Identifier(schema, "job_attempts")
        for job_id in ids:
            row = job(conn, schema, job_id)
            kinds = [a["outcome"] for a in attempts(conn, schema, job_id)]
            assert row["status"] in ("succeeded", "cancelled")
            if row["status"] == "cancelled":
                assert "succeeded" not in kinds
                assert row["attempts"] <= 1
            else:
                assert kinds == ["succeeded"]
                assert outcomes[job_id] in ("Refused", "leased")
            if outcomes[job_id] == "cancelled":  # cancelled while queued: it never started
                assert row["status"] == "cancelled" and row["attempts"] == 0 and kinds == []
        assert conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE outcome = 'succeeded'")
                            .format(table)).fetchone()["n"] == sum(
            1 for i in ids if job(conn, schema, i)["status"] == "succeeded")
        assert nothing_lost(conn, schema) == []


def test_stale_token_can_neither_extend_nor_finish(client, conn, schema):
    """The guards themselves, at the SQL level: a reclaimed job refuses its old token."""
    from jobrun.sql import for_schema
    q = for_schema(schema)
    job_id = client.enqueue("noop").job.id
    claim = claim_params(["default"], 1, "m1", 30)
    first = conn.execute(q.claim_jobs, claim).fetchone()
    conn.execute(sql.SQL("UPDATE {} SET status = 'queued', lease_owner = NULL WHERE id = %s")
                 .format(sql.Identifier(schema, "jobs")), [job_id])  # as the reaper would
    second = conn.execute(q.claim_jobs, claim).fetchone()  # the same owner claims it again
    assert second["lease_token"] == first["lease_token"] + 1
    stale = {"ids": [job_id], "tokens": [first["lease_token"]], "owner": "m1", "ttl": 30}
    assert conn.execute(q.heartbeat, stale).fetchall() == []
    complete = {"ids": [job_id], "tokens": [first["lease_token"]], "statuses": ["succeeded"],
                "outcomes": ["succeeded"], "delays": [0.0], "errors": [None], "tracebacks": [None],
                "results": ["1"], "children": [1], "crashed": [0], "logs": [None], "refunds": [0],
                "owner": "m1",
                "host": "h", "pid": 1}
    assert conn.execute(q.complete_jobs, complete).fetchall() == []
    assert job(conn, schema, job_id)["status"] == "leased"
    complete["tokens"] = [second["lease_token"]]
    assert [r["job_id"] for r in conn.execute(q.complete_jobs, complete).fetchall()] == [job_id]
    assert job(conn, schema, job_id)["status"] == "succeeded"


def test_reaper_requeues_expired_and_kills_spent(client, conn, schema):
    from jobrun.sql import for_schema
    q = for_schema(schema)
    retry_id = client.enqueue("noop", max_attempts=3).job.id
    spent_id = client.enqueue("noop", max_attempts=1).job.id
    claimed = conn.execute(q.claim_jobs, claim_params(["default"], 2, "gone", 0.001)).fetchall()
    assert {r["id"] for r in claimed} == {retry_id, spent_id}
    wait_for(lambda: conn.execute(sql.SQL("SELECT bool_and(lease_expires_at < now()) AS x FROM {}")
                                  .format(sql.Identifier(schema, "jobs"))).fetchone()["x"],
             timeout=5, message="leases to expire")
    reaped = conn.execute(q.reap_expired, reap_params(10, {})).fetchall()
    assert {r["job_id"] for r in reaped} == {retry_id, spent_id}
    assert job(conn, schema, retry_id)["status"] == "queued"
    assert job(conn, schema, spent_id)["status"] == "dead"
    assert [a["outcome"] for a in attempts(conn, schema, spent_id)] == ["lease_expired"]
    assert conn.execute(q.reap_expired, reap_params(10, {})).fetchall() == []
