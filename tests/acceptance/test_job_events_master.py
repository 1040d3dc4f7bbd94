"""The transition log of jobs a real master runs: a success, a failure retried with its delay
and then dead, a release at shutdown, each written by the master's own statements (claim,
completion batch, release) and read back as the story the shared check expects."""

from __future__ import annotations

import signal

from tests.invariants import event_violations


def story(client, job_id: int) -> list:
    # A start counted apart from the claim (a `started` event) is not what this test is about.
    return [e for e in client.events(job_id) if e.event != "started"]


def test_the_events_of_a_master_s_jobs(master, client, db, schema):
    m = master("-c", "1", "--grace", "0.5", "--lease-ttl", "60", ready=1)
    ok = client.enqueue("noop").job.id
    bad = client.enqueue("fail", max_attempts=2).job.id
    db.wait_status([ok, bad], timeout=30)

    done = story(client, ok)
    assert [e.event for e in done] == ["enqueued", "claimed", "succeeded"]
    owner = done[1].owner
    assert owner and done[2].owner == owner and done[2].outcome == "succeeded"

    failed = story(client, bad)
    assert [e.event for e in failed] == ["enqueued", "claimed", "retried", "claimed", "dead"]
    retried, dead = failed[2], failed[4]
    assert retried.outcome == "failed" and retried.status == "queued"
    assert 0 <= retried.detail["delay"] <= 1.0  # the default ladder's first step, jittered
    assert dead.outcome == "failed" and "boom on attempt 2" in dead.detail["error"]
    assert {e.owner for e in failed[1:]} == {owner}

    sleeper = client.enqueue("sleep", 30).job.id
    db.wait_status(sleeper, statuses=("leased",), timeout=10)
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    released = story(client, sleeper)[-1]
    assert (released.event, released.status, released.outcome, released.owner) == (
        "released", "queued", "released", owner)
    assert event_violations(db.conn, schema) == []
