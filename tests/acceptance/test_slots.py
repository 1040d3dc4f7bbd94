"""Slots (``--slots N``): a child runs up to N jobs at once of tasks that share a child (async
handlers as tasks on its loop, thread-safe plain ones on its pool); others keep a child to
themselves. A real master, real children, real PostgreSQL (``tests/apps/slotapp.py``)."""

from __future__ import annotations

import signal
import time

from jobrun.testing import wait_for

from tests.dbview import enqueue
from tests.masterproc import title

APP = "tests.apps.slotapp"


def overlap(rows: list[dict]) -> int:
    """The most of these runs (``started``/``finished`` in their results) at once."""
    edges = sorted([(r["started"], 1) for r in rows] + [(r["finished"], -1) for r in rows])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_async_jobs_share_one_child(master, client, db):
    m = master("-c", "1", "--slots", "50", app=APP, ready=1)
    began = time.monotonic()
    ids = enqueue(client, [("wait", {"s": 0.5}) for _ in range(50)])
    db.wait_status(ids, timeout=30)
    took = time.monotonic() - began
    results = [db.result(i) for i in ids]
    assert {r["pid"] for r in results} == set(m.children()) and len(m.children()) == 1
    assert overlap(results) >= 25, "50 half-second waits in one child ran mostly at once"
    assert took < 10, took  # one at a time would take 25 s
    for i in ids:
        job = db.job(i)
        assert (job["status"], job["attempts"]) == ("succeeded", 1)
        [attempt] = db.attempts(i)
        assert attempt["outcome"] == "succeeded"


def test_thread_safe_jobs_share_the_pool_and_others_run_alone(master, client, db):
    master("-c", "1", "--slots", "8", app=APP, ready=1)
    shared = enqueue(client, [("wait.sync", {"s": 0.4}) for _ in range(8)])
    db.wait_status(shared, timeout=30)
    results = [db.result(i) for i in shared]
    assert overlap(results) >= 4 and all(r["thread"].startswith("jobrun-slot") for r in results)

    mixed = enqueue(client, [("wait", {"s": 0.3}), ("alone", {"s": 0.3}), ("wait", {"s": 0.3}),
                             ("alone", {"s": 0.3}), ("wait.sync", {"s": 0.3})])
    db.wait_status(mixed, timeout=30)
    rows = {i: db.result(i) for i in mixed}
    for i in (mixed[1], mixed[3]):  # nothing ran beside a job of a task that does not share
        lone = rows[i]
        beside = [r for j, r in rows.items() if j != i
                  and r["started"] < lone["finished"] and r["finished"] > lone["started"]]
        assert beside == [], (lone, beside)


def test_each_job_keeps_its_own_log(master, client, db):
    master("-c", "1", "--slots", "10", app=APP, ready=1)
    ids = enqueue(client, [("chatty", None) for _ in range(5)] + [("chatty.sync", None) for _ in range(5)])
    db.wait_status(ids, timeout=30)
    for i in ids:
        [attempt] = db.attempts(i)
        text = attempt["log"]
        lines = [ln for ln in text.splitlines() if ln.strip()]
        assert len([ln for ln in lines if f"job {i} line" in ln]) == 5, text
        assert len([ln for ln in lines if f"print of job {i} #" in ln]) == 5, text
        others = [ln for ln in lines if f"job {i} " not in ln and f"job {i}" not in ln]
        assert others == [], f"lines of other jobs in job {i}'s log: {others}"


def test_a_cancel_stops_one_job_of_a_shared_child(master, client, db):
    master("-c", "1", "--slots", "4", "--lease-ttl", "3", app=APP, ready=1)
    spinning = client.enqueue("spin", None).job.id
    spinning_sync = client.enqueue("spin.sync", None).job.id
    neighbours = enqueue(client, [("wait", {"s": 2.0}) for _ in range(2)])
    wait_for(lambda: db.statuses([spinning, spinning_sync] + neighbours)
             == {i: "leased" for i in [spinning, spinning_sync] + neighbours},
             timeout=15, message="all four running")
    client.cancel(spinning)
    client.cancel(spinning_sync)
    db.wait_status([spinning, spinning_sync], timeout=20)
    assert db.job(spinning)["status"] == "cancelled"
    assert db.job(spinning_sync)["status"] == "cancelled"
    db.wait_status(neighbours, timeout=20)
    assert [db.job(i)["status"] for i in neighbours] == ["succeeded", "succeeded"]


def test_a_hung_thread_gets_its_child_killed_and_its_neighbours_released(master, client, db):
    m = master("-c", "1", "--slots", "4", "--lease-ttl", "3", app=APP, ready=1)
    neighbours = enqueue(client, [("wait", {"s": 4.0}) for _ in range(2)])
    wait_for(lambda: set(db.statuses(neighbours).values()) == {"leased"}, timeout=15,
             message="the neighbours running")
    [child] = m.children()
    hung = client.enqueue("hang", {"s": 3600}, max_attempts=1).job.id
    db.wait_status([hung], timeout=30)
    assert db.job(hung)["status"] == "dead"
    [attempt] = db.attempts(hung)
    assert attempt["outcome"] == "timeout" and "hard time limit" in attempt["error"], attempt
    db.wait_status(neighbours, timeout=30)
    for i in neighbours:
        attempts = db.attempts(i)
        outcomes = [a["outcome"] for a in attempts]
        assert outcomes == ["released", "succeeded"], outcomes
        assert f"killed for job {hung}" in attempts[0]["error"], attempts[0]
        job = db.job(i)
        assert (job["status"], job["attempts"]) == ("succeeded", 2)  # both starts counted
    assert m.running() and child not in m.children()  # the child was killed, the master runs on


def test_a_crash_records_every_job_of_its_child(master, client, db):
    master("-c", "1", "--slots", "4", app=APP, ready=1)
    neighbours = enqueue(client, [("wait", {"s": 5.0}) for _ in range(2)], max_attempts=2)
    wait_for(lambda: set(db.statuses(neighbours).values()) == {"leased"}, timeout=15,
             message="the neighbours running")
    crash = client.enqueue("crash", {"s": 0.2}, max_attempts=1).job.id
    db.wait_status([crash], timeout=30)
    assert db.attempts(crash)[0]["outcome"] == "worker_lost"
    for i in neighbours:
        wait_for(lambda: db.attempts(i), timeout=15, message="the neighbour's attempt")
        assert db.attempts(i)[0]["outcome"] == "worker_lost"


def test_the_child_title_shows_its_slots(master, client, db):
    m = master("-c", "1", "--slots", "6", app=APP, ready=1)
    ids = enqueue(client, [("wait", {"s": 3.0}) for _ in range(3)])
    [child] = m.children()
    wait_for(lambda: "3/6 slots" in title(child), timeout=15, message="3/6 slots in the title")
    m.signal(signal.SIGTERM)
    assert m.wait(30) == 0
    assert set(db.statuses(ids).values()) <= {"succeeded", "queued"}


def test_a_lost_lease_fences_one_job_and_spares_its_neighbours(master, client, db):
    m = master("-c", "1", "--slots", "4", "--lease-ttl", "3", app=APP, ready=1)
    lost = [client.enqueue("spin", None).job.id, client.enqueue("spin.sync", None).job.id]
    neighbours = enqueue(client, [("wait", {"s": 4.0}) for _ in range(2)])
    wait_for(lambda: set(db.statuses(lost + neighbours).values()) == {"leased"}, timeout=15,
             message="all four running")
    [child] = m.children()
    tokens = {i: db.job(i)["lease_token"] for i in lost}
    # Another holder took these leases (as after a reaper's requeue and a re-claim elsewhere).
    db.conn.execute(f'UPDATE "{db.schema}".jobs SET lease_token = lease_token + 100'
                    " WHERE id = ANY(%s)", (lost,))
    wait_for(lambda: m.stderr().count("lease.fenced") >= 2, timeout=20,
             message="both fenced")
    db.wait_status(neighbours, timeout=30)
    for i in neighbours:
        assert [a["outcome"] for a in db.attempts(i)] == ["succeeded"]
    for i in lost:  # (the reaper may record the stolen lease's expiry: another token)
        assert tokens[i] not in [a["lease_token"] for a in db.attempts(i)], \
            "a fenced attempt's outcome is never recorded"
    assert m.children() == [child], "fenced by a frame: the child was not killed"
    assert "child.fence_kill" not in m.stderr()


def test_soft_time_limits_hold_per_job(master, client, db):
    master("-c", "1", "--slots", "4", app=APP, ready=1)
    slow = enqueue(client, [("slow", None), ("slow.sync", None)], max_attempts=1)
    beside = client.enqueue("wait", {"s": 1.0}).job.id
    db.wait_status(slow + [beside], timeout=30)
    for i in slow:
        [attempt] = db.attempts(i)
        assert attempt["outcome"] == "timeout" and "soft time limit" in attempt["error"], attempt
        assert db.job(i)["status"] == "dead"
    assert [a["outcome"] for a in db.attempts(beside)] == ["succeeded"]


def test_max_tasks_per_child_recycles_after_the_jobs_in_flight(master, client, db):
    m = master("-c", "1", "--slots", "4", "--max-tasks-per-child", "6", app=APP, ready=1)
    first = m.children()
    ids = enqueue(client, [("wait", {"s": 0.2}) for _ in range(18)])
    db.wait_status(ids, timeout=60)
    results = [db.result(i) for i in ids]
    per_child: dict[int, int] = {}
    for r in results:
        per_child[r["pid"]] = per_child.get(r["pid"], 0) + 1
    assert all(n <= 6 for n in per_child.values()) and len(per_child) >= 3, per_child
    assert [db.job(i)["status"] for i in ids] == ["succeeded"] * 18
    assert all(len(db.attempts(i)) == 1 for i in ids), "a recycled child's jobs were not rerun"
    assert not set(first) & set(m.children())


def test_hup_applies_a_new_slots_setting_to_the_new_children(master, client, db, tmp_path):
    conf = tmp_path / "jobrun.toml"
    conf.write_text("slots = 1\n")
    m = master("-c", "1", "--config", str(conf), app=APP, ready=1)
    first = enqueue(client, [("wait", {"s": 0.4}) for _ in range(3)])
    db.wait_status(first, timeout=30)
    assert overlap([db.result(i) for i in first]) == 1  # one at a time

    [old] = m.children()
    conf.write_text("slots = 3\n")
    m.signal(signal.SIGHUP)
    wait_for(lambda: old not in m.children() and len(m.idle_children()) == 1, timeout=30,
             message="the new generation serving")
    again = enqueue(client, [("wait", {"s": 0.6}) for _ in range(3)])
    db.wait_status(again, timeout=30)
    assert overlap([db.result(i) for i in again]) == 3
