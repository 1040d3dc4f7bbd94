"""Prefetch: a busy child handed more jobs, which wait in its pipe (a real master, real
children, a real PostgreSQL). Every wait is on a condition with a deadline.

A claim stamps ``started_at`` with its statement's time, so the number of distinct
``started_at`` values among a set of jobs is the number of claims that took them.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from jobrun.testing import wait_for

from tests.masterproc import APP, ROOT
from tests.dbview import Db, enqueue

N = 300


def claims(db: Db, ids: list[int]) -> int:
    return db.rows("SELECT count(DISTINCT started_at) AS n FROM {s}.jobs WHERE id = ANY(%s)",
                   (ids,))[0]["n"]


def attempt_outcomes(db: Db, ids: list[int]) -> dict[int, list[str]]:
    rows = db.rows("SELECT job_id, outcome FROM {s}.job_attempts WHERE job_id = ANY(%s)"
                   " ORDER BY job_id, lease_token", (ids,))
    out: dict[int, list[str]] = {}
    for row in rows:
        out.setdefault(row["job_id"], []).append(row["outcome"])
    return out


def assert_ran_once(db: Db, ids: list[int]) -> None:
    assert db.statuses(ids) == {i: "succeeded" for i in ids}
    assert attempt_outcomes(db, ids) == {i: ["succeeded"] for i in ids}
    assert {r["attempts"] for r in db.rows("SELECT attempts FROM {s}.jobs WHERE id = ANY(%s)",
                                            (ids,))} == {1}


def test_one_child_takes_many_jobs_per_claim(master, client, db):
    master("-c", "1", ready=1)
    ids = enqueue(client, [("noop", i) for i in range(N)])
    db.wait_status(ids, timeout=60)
    assert_ran_once(db, ids)
    # One child, one job per claim would take N claims; handed ahead, far fewer.
    assert claims(db, ids) <= N // 4


def test_prefetch_1_hands_one_job_at_a_time(master, client, db):
    master("-c", "1", "--prefetch", "1", ready=1)
    ids = enqueue(client, [("noop", i) for i in range(N // 3)])
    db.wait_status(ids, timeout=60)
    assert_ran_once(db, ids)
    assert claims(db, ids) == N // 3


def test_slow_tasks_are_not_handed_ahead(master, client, db):
    master("-c", "1", ready=1)
    # sleep(0.05) runs longer than the 20 ms budget: one job per claim.
    ids = enqueue(client, [("sleep", 0.05)] * 12)
    db.wait_status(ids, timeout=60)
    assert_ran_once(db, ids)
    assert claims(db, ids) == 12


def test_jobs_waiting_in_a_child_that_dies_go_back_uncounted(master, client, db):
    m = master("-c", "1", ready=1)
    # Teach the master that both tasks are short.
    warm = enqueue(client, [("crash", {"how": "none"})] * 20 + [("noop", i) for i in range(20)])
    db.wait_status(warm, timeout=60)
    # The crash job is claimed first (lowest id) and the noops are handed in behind it.
    crash, *behind = enqueue(client, [("crash", {"how": "sigkill"})] + [("noop", i) for i in range(30)])
    db.wait_status([crash] + behind, timeout=60)

    given = [int(x) for x in re.findall(r"jobs\.given_back .*?jobs=(\d+) reason=\"child exited\"", m.stderr())]
    assert given and sum(given) >= 1, m.stderr()[-3000:]
    assert_ran_once(db, behind)  # given back as if never claimed: no attempt spent or recorded
    job = db.job(crash)
    assert (job["status"], job["crashes"], job["attempts"]) == ("dead", 3, 3)
    assert attempt_outcomes(db, [crash]) == {crash: ["worker_lost"] * 3}


def test_no_child_is_handed_jobs_past_its_task_limit(master, client, db):
    m = master("-c", "1", "--max-tasks-per-child", "7", ready=1)
    ids = enqueue(client, [("noop", i) for i in range(80)])
    db.wait_status(ids, timeout=90)
    assert_ran_once(db, ids)
    wait_for(lambda: m.stderr().count("child.recycle") >= 80 // 7,
             message="children recycled every 7 jobs")
    # Recycling is planned for: nothing was in a retiring child's pipe.
    assert "jobs.given_back" not in m.stderr()


@pytest.mark.parametrize("args, says", [
    (("--prefetch", "0"), "--prefetch must be at least 1"),
    (("--prefetch-max-runtime", "soon"), "invalid duration"),
])
def test_bad_prefetch_settings_are_refused(db_env, args, says):
    env = {**db_env, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "-A", APP, *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
