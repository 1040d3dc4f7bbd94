"""Workflows in the seeded fault mix: chords and chains (some with a parent that fails for
good) run by real masters whose children and masters are SIGKILLed, then held to the shared
checker (tests/invariants.py): every callback of a workflow whose parents all succeeded ran
its effects exactly once, none started before its last parent finished, and none ran after a
dead parent (it is cancelled, with the reason). ``JOBRUN_FAULT_SEED=<seed>`` replays a run."""

from __future__ import annotations

import os
import signal

import jobrun
import pytest
from psycopg import sql

from jobrun.testing import wait_for
from tests.acceptance.test_faults import (conclude, conn, faults, inject,  # noqa: F401
                                          private_db)
from tests.faults.load import (Fleet, enqueue_workflows, finished, own_connection, prepare,
                               restart_immediate)
from tests.invariants import violations
from tests.masterproc import live

pytestmark = pytest.mark.acceptance


def test_workflows_through_sigkills_of_children_and_masters(db_env, tmp_path, pg_dsn, schema,
                                                            client, conn, faults):
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        fleet.start_many(2, ready=2)
        enqueue_workflows(client, faults, 6)
        inject(conn, schema, faults,
               {"child": fleet.kill_child, "child2": fleet.kill_child,
                "master": fleet.kill_master}, count=4,
               more=lambda: enqueue_workflows(client, faults, 2))
        conclude(conn, schema, faults, fleet, intended=("succeeded", "dead", "cancelled"))
        counts = dict(conn.execute(sql.SQL(
            "SELECT status, count(*) FROM {} WHERE task = 'effect' GROUP BY status").format(
                sql.Identifier(schema, "jobs"))).fetchall())
        assert counts.get("succeeded"), faults.explain(f"no callback ran: {counts}")


def test_workflows_through_postgres_restarts(tmp_path, private_db, faults):
    cluster, env, schema = private_db

    def wave(n):
        with jobrun.Client(cluster.dsn, schema=schema) as c:
            enqueue_workflows(c, faults, n)

    with faults, own_connection(cluster.dsn) as setup:
        prepare(setup, schema)
    with faults, Fleet(env, tmp_path, faults, "-c", "2", record_dsn=cluster.dsn) as fleet:
        fleet.start_many(2, ready=2)
        wave(6)
        for _ in range(2):
            with own_connection(cluster.dsn) as c:
                done = finished(c, schema)
                wait_for(lambda: finished(c, schema) > done, timeout=30, message="progress")
            faults.pause(0.0, 0.5)
            restart_immediate(cluster)
            faults.count("pg_restart_immediate")
            wave(3)
        with own_connection(cluster.dsn) as c:
            conclude(c, schema, faults, fleet, intended=("succeeded", "dead", "cancelled"))


def test_workflows_through_a_master_stopped_past_its_leases(db_env, tmp_path, pg_dsn, schema,
                                                           client, conn, faults):
    """Master A and its children are stopped past the TTL while they hold workflow members;
    master B takes them over; A, continued, finds its leases lost and settles nothing."""
    with faults, Fleet(db_env, tmp_path, faults, "-c", "2", record_dsn=pg_dsn) as fleet:
        a = fleet.start(ready=2)
        enqueue_workflows(client, faults, 6, sleep=1.0, doomed=0.0)
        wait_for(lambda: conn.execute(sql.SQL(
            "SELECT count(*) FROM {} WHERE status = 'leased' AND lease_owner LIKE %s").format(
                sql.Identifier(schema, "jobs")), [f"%:{a.pid}:%"]).fetchone()[0],
            timeout=20, message="A holding workflow members")
        frozen = [a.pid, *a.children()]
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        faults.count("sigstop_master", f"pid={a.pid}")
        try:
            fleet.start()
            conclude(conn, schema, faults, fleet, settle=60,
                     intended=("succeeded", "dead", "cancelled"))
        finally:
            for pid in frozen:
                if live(pid):
                    os.kill(pid, signal.SIGCONT)
        wait_for(lambda: "lease.fenced" in a.stderr() or "complete.refused" in a.stderr(),
                 timeout=15, message="A to notice its lost leases")
        conclude(conn, schema, faults, fleet, intended=("succeeded", "dead", "cancelled"))


def test_the_checker_sees_a_dependent_started_early_and_a_cancel_without_a_failed_parent(
        conn, schema, client):
    from jobrun import workflows as wf

    a, b = client.enqueue_workflow(wf.chain("record", "record")).job_ids
    c, d = client.enqueue_workflow(wf.chain("record", "record")).job_ids

    def run(text, params=()):
        conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params)

    # b's handler started while a had not finished; d cancelled though c is still queued.
    run("INSERT INTO {s}.starts (start_id, job_id, attempt, token, pid)"
        " VALUES (gen_random_uuid(), %s, 1, 1, 1)", (b,))
    run("UPDATE {s}.jobs SET status = 'cancelled', cancel_reason = 'parent job 1 ended dead'"
        " WHERE id = %s", (d,))
    found = set(violations(conn, schema, intended=("succeeded", "dead", "cancelled", "queued",
                                                   "waiting")))
    assert ("a dependent started before its parents all succeeded", b) in found
    assert ("cancelled for a parent that did not fail", d) in found
