"""Workflows run by a real ``jobrun-master``: a chain passes its results step to step, a
callback after a group reads every member's result, a dead parent cancels its dependents
and none of them starts (docs/workflows.md). Waits are on database conditions."""

from __future__ import annotations

import pytest

from jobrun import workflows as wf

from tests.invariants import nothing_lost

pytestmark = pytest.mark.acceptance

APP = "tests.apps.flowapp"


def test_a_chain_and_a_chord_run_with_their_parents_results(master, client, db):
    master("-c", "2", app=APP, ready=2)
    chain = client.enqueue_workflow(wf.chain(*[wf.Step("add", n) for n in (1, 2, 3, 4)]))
    chord = client.enqueue_workflow(
        wf.chord(wf.group(*[wf.Step("value", n) for n in range(10)]), wf.Step("add", 100)))
    db.wait_status(chain.job_ids + chord.job_ids, ("succeeded",))
    steps = [db.result(j) for j in chain.job_ids]
    assert [s["sum"] for s in steps] == [1, 3, 6, 10]
    assert [s["parents"] for s in steps] == [[]] + [[p] for p in chain.job_ids[:-1]]
    callback = db.result(chord.job_ids[-1])
    assert callback == {"sum": 100 + sum(range(10)), "parents": sorted(chord.job_ids[:-1])}
    # Each dependent started after its last parent finished (tests/invariants.py).
    assert nothing_lost(db.conn, db.schema) == []


def test_a_dead_parent_cancels_its_callback_which_never_starts(master, client, db):
    master("-c", "2", app=APP, ready=2)
    flow = client.enqueue_workflow(wf.chord(wf.group(wf.Step("value", 1), "fail"), "add"))
    *parents, callback = flow.job_ids
    db.wait_status(flow.job_ids)
    assert db.statuses(flow.job_ids) == {parents[0]: "succeeded", parents[1]: "dead",
                                         callback: "cancelled"}
    assert db.job(callback)["attempts"] == 0
    assert db.job(callback)["cancel_reason"] == f"parent job {parents[1]} ended dead"
    assert nothing_lost(db.conn, db.schema) == []
