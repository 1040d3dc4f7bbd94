"""Workflows in the seeded fault mix: chords and chains (some with a parent that fails for
good) run by real masters whose children and masters are SIGKILLed, then held to the shared
checker (tests/invariants.py): every callback of a workflow whose parents all succeeded ran
its effects exactly once, none started before its last parent finished, and none ran after a
dead parent (it is cancelled, with the reason). ``JOBRUN_FAULT_SEED=<seed>`` replays a run."""

from __future__ import annotations

import pytest
from psycopg import sql

from tests.acceptance.test_faults import conclude, conn, faults, inject  # noqa: F401
from tests.faults.load import Fleet, enqueue_workflows
from tests.invariants import violations

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
