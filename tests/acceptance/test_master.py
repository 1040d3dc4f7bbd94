"""The prefork master, end to end: a real ``jobrun-master`` subprocess, real children, real
signals and a real PostgreSQL (one schema per test).

Every wait is on a condition with a deadline (``wait_for``), reading the database, the
master's stderr or /proc; nothing sleeps to synchronise.
"""

from __future__ import annotations

import os
import random
import re
import signal
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from jobrun.policy import DEFAULT_RETRY
from jobrun.testing import wait_for

from tests.dbview import Db, enqueue
from tests.masterproc import APP, MasterProcess, live, title


def sockets(pid: int) -> set[str]:
    """The socket inodes a process holds open."""
    found = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


def busy_children(m: MasterProcess) -> list[int]:
    return [p for p in m.children() if " job=" in title(p)]


def stop(m: MasterProcess, timeout: float = 20.0) -> int:
    m.signal(signal.SIGTERM)
    return m.wait(timeout)


# --- jobs run end to end --------------------------------------------------------------------

def test_jobs_run_end_to_end(master, client, db):
    m = master("-c", "2", ready=2)
    ids = enqueue(client, [("noop", i) for i in range(20)])
    async_id = client.enqueue("async_noop", {"x": 1}).job.id
    db.wait_status(ids + [async_id])
    for i, job_id in enumerate(ids):
        job = db.job(job_id)
        assert (job["status"], job["attempts"], job["lease_owner"]) == ("succeeded", 1, None)
        [attempt] = db.attempts(job_id)
        assert attempt["outcome"] == "succeeded"
        assert attempt["worker_pid"] == m.pid
        assert attempt["worker_child"] in (1, 2)
        assert attempt["result"] == {"ok": True, "payload": i}
        assert attempt["started_at"] <= attempt["finished_at"]
    assert db.result(async_id) == {"async": True, "payload": {"x": 1}}
    assert stop(m) == 0


def test_claims_no_more_than_idle_children(master, client, db):
    """A master with 2 children never holds more than 2 leases for longer than a completion
    write takes. (A child is handed its next job as soon as it answers, while the answer's
    guarded write is still on its way: for those milliseconds the table shows 3 leased.)"""
    master("-c", "2", ready=2)
    ids = enqueue(client, [("sleep", 1.0)] * 6)
    seen: list[int] = []
    over_since: list[float] = []

    def done() -> bool:
        leased = db.count("status = 'leased'")
        seen.append(leased)
        if leased <= 2:
            over_since.clear()
        else:
            over_since.append(time.monotonic())
            assert over_since[-1] - over_since[0] < 0.5, f"{leased} jobs leased for 0.5 s by 2 children"
        return db.count("status = 'succeeded'") == 6
    wait_for(done, timeout=20, interval=0.02, message="6 sleep jobs")
    assert max(seen) >= 2  # the sampling saw the master busy
    # Each job was claimed exactly once (a claim beyond the idle children would have been
    # given back and claimed again, bumping the fencing token), and started once.
    rows = db.rows("SELECT attempts, lease_token FROM {s}.jobs WHERE id = ANY(%s)", (ids,))
    assert [(r["attempts"], r["lease_token"]) for r in rows] == [(1, 1)] * 6


# --- failures, retries, dead letters --------------------------------------------------------

def test_failures_retries_and_dead_jobs(master, client, db):
    master("-c", "3", "--poll-interval", "0.05", ready=3)
    fails = enqueue(client, [("fail", None)] * 5, max_attempts=3)
    permanent = client.enqueue("permanent").job.id
    later = client.enqueue("retry_later", 60).job.id
    unknown = client.enqueue("no.such.task", {"a": 1}).job.id
    db.wait_status(fails + [permanent, unknown], timeout=30)

    gaps = 0.0
    for job_id in fails:
        job = db.job(job_id)
        assert (job["status"], job["attempts"]) == ("dead", 3)
        attempts = db.attempts(job_id)
        assert [a["attempt"] for a in attempts] == [1, 2, 3]
        assert {a["outcome"] for a in attempts} == {"failed"}
        for n, a in enumerate(attempts, 1):
            assert a["error"] == f"RuntimeError: boom on attempt {n}"
            assert "Traceback" in a["traceback"] and "in fail" in a["traceback"]
        for n, (a, b) in enumerate(zip(attempts, attempts[1:]), 1):
            gap = (b["started_at"] - a["finished_at"]).total_seconds()
            # Full jitter: U(0, ceiling); the slack covers the poll interval and a slow claim.
            assert -0.05 <= gap <= DEFAULT_RETRY.ceiling(n) + 1.0, (n, gap)
            gaps += gap
    # Ten draws of U(0, 1 s) or U(0, 2 s) sum to under 1 s with probability ~1e-8; without
    # backoff the ten gaps are a poll interval (50 ms) each at most.
    assert gaps > 1.0, gaps

    job = db.job(permanent)
    assert (job["status"], job["attempts"]) == ("dead", 1)
    [a] = db.attempts(permanent)
    assert a["outcome"] == "failed" and "this job can never succeed" in a["error"]

    wait_for(lambda: db.attempts(later), timeout=10, message="the retry attempt")
    job = db.job(later)
    assert (job["status"], job["attempts"]) == ("queued", 1)
    assert job["run_in"].total_seconds() > 50
    [a] = db.attempts(later)
    assert a["outcome"] == "retry" and a["traceback"] is None

    job = db.job(unknown)
    assert (job["status"], job["attempts"]) == ("dead", 1)
    [a] = db.attempts(unknown)
    assert a["outcome"] == "failed"
    assert "no.such.task" in a["error"] and APP in a["error"]


# --- crash containment ----------------------------------------------------------------------

def test_crash_containment(master, client, db):
    m = master("-c", "3", ready=3)
    crashes = {how: client.enqueue("crash", {"how": how}, max_attempts=5).job.id
               for how in ("sigkill", "sigsegv", "exit")}
    once = client.enqueue("crash_once").job.id
    sleepers = enqueue(client, [("sleep", 0.3)] * 6)
    db.wait_status(list(crashes.values()) + [once] + sleepers, timeout=40)

    expected = {"sigkill": "killed by SIGKILL", "sigsegv": "killed by SIGSEGV",
                "exit": "exited with code 7"}
    for how, job_id in crashes.items():
        job = db.job(job_id)
        # A poison job: dead after max_crashes (3), before its 5 attempts are spent.
        assert (job["status"], job["crashes"], job["attempts"]) == ("dead", 3, 3), how
        attempts = db.attempts(job_id)
        assert [a["outcome"] for a in attempts] == ["worker_lost"] * 3
        for a in attempts:
            assert expected[how] in a["error"], a["error"]
            assert a["worker_pid"] == m.pid
    assert "perhaps out of memory" in db.attempts(crashes["sigkill"])[0]["error"]

    job = db.job(once)
    assert (job["status"], job["attempts"], job["crashes"]) == ("succeeded", 2, 1)
    assert [a["outcome"] for a in db.attempts(once)] == ["worker_lost", "succeeded"]
    assert db.result(once) == {"attempt": 2}

    for job_id in sleepers:
        assert db.job(job_id)["status"] == "succeeded"
        assert [a["outcome"] for a in db.attempts(job_id)] == ["succeeded"]

    m.wait_children(3)
    assert "child.lost" in m.stderr()
    assert stop(m) == 0


def test_random_kills_under_load(master, client, db):
    rng = random.Random(1234)
    m = master("-c", "4", "--lease-ttl", "6", ready=4)
    items = [("noop", i) if i % 2 else ("sleep", 0.1) for i in range(200)]
    ids = enqueue(client, items, max_attempts=5)

    kills = 0
    for _ in range(6):
        target = db.count("status IN ('succeeded', 'dead')") + 15
        wait_for(lambda: db.count("status IN ('succeeded', 'dead')") >= min(target, 200),
                 timeout=30, message="progress between kills")
        # Mostly children inside a 100 ms sleep, so most kills hit a running job.
        victims = [p for p in m.children() if ": sleep job=" in title(p)] or m.children()
        if not victims:
            continue
        try:
            os.kill(rng.choice(victims), signal.SIGKILL)
            kills += 1
        except ProcessLookupError:
            pass
    assert kills >= 3

    db.wait_status(ids, timeout=90)
    assert db.count("status IN ('queued', 'leased')") == 0
    rows = db.rows("SELECT j.id, j.status, j.attempts, j.max_attempts, j.crashes,"
                   " (SELECT count(*) FROM {s}.job_attempts a WHERE a.job_id = j.id) AS recorded"
                   " FROM {s}.jobs j")
    assert len(rows) == 200
    for r in rows:
        assert r["status"] in ("succeeded", "dead"), r
        assert r["attempts"] <= r["max_attempts"], r
        # The master lived: every start has exactly one recorded outcome (none left to the reaper).
        assert r["recorded"] == r["attempts"], r
    assert sum(r["crashes"] for r in rows) >= 1  # some kills hit a running job
    odd = db.rows("SELECT * FROM {s}.job_attempts WHERE outcome NOT IN"
                  " ('succeeded', 'worker_lost', 'released') ORDER BY job_id, lease_token")
    assert not odd, (odd, m.stderr()[-5000:])

    m.wait_children(4)
    seen = set(m.seen)
    assert stop(m) == 0
    wait_for(lambda: not any(live(p) for p in seen), timeout=10, message="children to be gone")


def test_completed_jobs_are_never_fenced(master, client, db):
    """Regression: a job that completes while a heartbeat runs is missing from its answer;
    the heartbeater used to fence it anyway, and the SIGUSR1 interrupted the child's *next*
    job (LeaseLost), whose lease then lapsed. Many short jobs and frequent beats."""
    m = master("-c", "4", "--lease-ttl", "1.5", ready=4)
    ids = enqueue(client, [("sleep", 0.03)] * 800)
    db.wait_status(ids, timeout=90)
    odd = db.rows("SELECT job_id, outcome, error FROM {s}.job_attempts WHERE outcome <> 'succeeded'")
    fences = [line for line in m.stderr().splitlines() if "lease.fenced" in line]
    assert not odd and not fences, (odd, fences)
    assert db.count("status = 'succeeded' AND attempts = 1") == 800

# --- recycling ------------------------------------------------------------------------------

def test_recycle_after_max_tasks(master, client, db):
    m = master("-c", "2", "--max-tasks-per-child", "3", ready=2)
    ids = enqueue(client, [("pid", None)] * 10)
    db.wait_status(ids)
    results = [db.result(i) for i in ids]
    pids = {r["pid"] for r in results}
    assert len(pids) >= 4, pids  # 10 jobs, at most 3 per child
    assert {r["ppid"] for r in results} == {m.pid}
    assert "reason=max_tasks" in m.stderr()
    m.wait_children(2)


def test_recycle_over_max_memory(master, client, db):
    m = master("-c", "1", "--max-memory-per-child", "120", ready=1)

    def run(task, payload=None):
        job_id = client.enqueue(task, payload).job.id
        db.wait_status(job_id)
        return db.result(job_id)

    first = run("pid")["pid"]
    assert run("memhog", 200)["pid"] == first
    second = run("pid")["pid"]
    assert second != first
    assert not live(first)
    assert "reason=max_memory" in m.stderr()
    assert "child.over_memory_at_start" not in m.stderr()


def test_memory_limit_below_fresh_child_does_not_churn(master, client, db):
    m = master("-c", "2", "--max-memory-per-child", "1", ready=2)
    kids = set(m.children())
    ids = enqueue(client, [("pid", None)] * 10)
    db.wait_status(ids)
    assert {db.result(i)["pid"] for i in ids} <= kids  # the same children ran them all
    assert set(m.children()) == kids
    err = m.stderr()
    assert err.count("child.over_memory_at_start") == 1
    assert "child.recycle" not in err


# --- time limits ----------------------------------------------------------------------------

def test_soft_time_limit(master, client, db):
    master("-c", "2", ready=2)
    caught = client.enqueue("soft_limited", {"catch": True}).job.id
    raised = client.enqueue("soft_limited", {"catch": False}, max_attempts=1).job.id
    db.wait_status([caught, raised], timeout=15)

    result = db.result(caught)
    assert result["soft_time_limit"] is True and 0.4 <= result["after"] < 5

    job = db.job(raised)
    assert job["status"] == "dead"
    [a] = db.attempts(raised)
    assert a["outcome"] == "timeout"
    assert a["error"] == "soft time limit exceeded"
    assert "SoftTimeLimit" in a["traceback"]


def test_hard_time_limit(master, client, db):
    m = master("-c", "1", ready=1)
    [before] = m.children()
    job_id = client.enqueue("hard_limited", max_attempts=1).job.id
    started = time.monotonic()
    db.wait_status(job_id, timeout=15)
    assert time.monotonic() - started < 8  # killed at 1 s, not after its 30 s sleep
    assert db.job(job_id)["status"] == "dead"
    [a] = db.attempts(job_id)
    assert a["outcome"] == "timeout"
    assert "hard time limit of 1s exceeded" in a["error"] and "SIGKILL" in a["error"]
    assert "job.time_limit" in m.stderr()
    [after] = m.wait_children(1)
    assert after != before and not live(before)
    follow = client.enqueue("pid").job.id
    db.wait_status(follow)
    assert db.result(follow)["pid"] == after


# --- process titles -------------------------------------------------------------------------

def _with_password(dsn: str) -> tuple[str, str]:
    parts = urlsplit(dsn)
    if parts.password:
        return dsn, parts.password
    user = parts.username or "postgres"
    host = parts.netloc.rpartition("@")[2]
    secret = "pw123"
    return urlunsplit(parts._replace(netloc=f"{user}:{secret}@{host}")), secret


def test_process_titles_without_password(master, client, db, db_env):
    dsn, secret = _with_password(db_env["JOBRUN_DATABASE_URL"])
    m = master("-c", "2", env={**db_env, "JOBRUN_DATABASE_URL": dsn}, ready=2)
    idle_title = re.compile(r"^jobrun-child [12]: idle$")
    assert all(idle_title.match(title(p)) for p in m.children())
    wait_for(lambda: title(m.pid).startswith(f"jobrun-master: {APP} c=2 busy=0"),
             message="the master's idle title")

    job_id = client.enqueue("sleep", 2).job.id
    busy_title = re.compile(rf"^jobrun-child [12]: sleep job={job_id}\b")
    busy = wait_for(lambda: busy_children(m), timeout=10, message="a busy child")
    assert busy_title.match(title(busy[0])), title(busy[0])
    wait_for(lambda: title(m.pid).startswith(f"jobrun-master: {APP} c=2 busy=1"),
             message="the master's busy title")
    [idle] = [p for p in m.children() if p != busy[0]]
    assert idle_title.match(title(idle)), title(idle)

    titles = [title(m.pid)] + [title(p) for p in m.children()]
    assert all(secret not in t for t in titles), titles
    db.wait_status(job_id, timeout=10)
    assert stop(m) == 0
    assert secret not in m.stderr()


# --- signals --------------------------------------------------------------------------------

def test_term_drains_in_flight_jobs(master, client, db):
    m = master("-c", "1", "--grace", "20", ready=1)
    job_id = client.enqueue("sleep", 1).job.id
    db.wait_status(job_id, statuses=("leased",), timeout=10)
    waiting = enqueue(client, [("noop", None)] * 3)
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    assert db.job(job_id)["status"] == "succeeded"
    assert [a["outcome"] for a in db.attempts(job_id)] == ["succeeded"]
    for w in waiting:  # nothing new was claimed during the drain
        job = db.job(w)
        assert (job["status"], job["attempts"]) == ("queued", 0)
    assert "master.draining" in m.stderr()


def test_term_releases_jobs_past_grace(master, client, db):
    m = master("-c", "1", "--grace", "0.5", "--lease-ttl", "60", ready=1)
    job_id = client.enqueue("sleep", 30).job.id
    db.wait_status(job_id, statuses=("leased",), timeout=10)
    [child] = m.children()
    started = time.monotonic()
    m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    assert time.monotonic() - started < 8
    job = db.job(job_id)  # back in the queue at once, not left leased for the reaper
    # The master cut it short: back at once, and the start counts against max_attempts.
    assert (job["status"], job["attempts"], job["lease_owner"]) == ("queued", 1, None)
    assert job["run_in"].total_seconds() <= 0
    [a] = db.attempts(job_id)
    assert a["outcome"] == "released" and a["attempt"] == 1
    wait_for(lambda: not live(child), message="the child to be gone")


def test_a_job_released_at_every_stop_ends_dead_at_its_bound(master, client, db):
    """A job longer than the time between two deploys: each stop releases it, each release
    counts as a start, and the last one ends it dead with the reason (it would otherwise start
    forever)."""
    job_id = client.enqueue("sleep", 30, max_attempts=2).job.id
    for stop in (1, 2):
        m = master("-c", "1", "--grace", "0.5", "--lease-ttl", "60")
        m.wait_ready()  # (not for an idle child: the queued job may keep it busy at once)
        db.wait_status(job_id, statuses=("leased",), timeout=10)
        m.signal(signal.SIGTERM)
        assert m.wait(15) == 0
        job = db.job(job_id)
        assert job["attempts"] == stop
        assert job["status"] == ("queued" if stop == 1 else "dead")
    attempts = db.attempts(job_id)
    assert [a["outcome"] for a in attempts] == ["released", "released"]
    assert all("released at shutdown" in a["error"] for a in attempts)


@pytest.mark.parametrize("how", ["term_twice", "quit"])
def test_fast_stop(master, client, db, how):
    m = master("-c", "1", "--grace", "60", "--lease-ttl", "60", ready=1)
    job_id = client.enqueue("sleep", 30).job.id
    db.wait_status(job_id, statuses=("leased",), timeout=10)
    started = time.monotonic()
    if how == "quit":
        m.signal(signal.SIGQUIT)
    else:
        m.signal(signal.SIGTERM)
        wait_for(lambda: "master.draining" in m.stderr(), message="the drain to begin")
        m.signal(signal.SIGTERM)
    assert m.wait(15) == 0
    assert time.monotonic() - started < 8  # not the 60 s grace
    job = db.job(job_id)
    assert (job["status"], job["lease_owner"]) == ("queued", None)
    assert [a["outcome"] for a in db.attempts(job_id)] == ["released"]
    assert "master.stopping_fast" in m.stderr() or how == "term_twice"


def test_hup_replaces_children_without_losing_jobs(master, client, db):
    m = master("-c", "2", ready=2)
    old = set(m.children())
    running = enqueue(client, [("sleep", 1.5)] * 2)
    db.wait_status(running, statuses=("leased",), timeout=10)
    m.signal(signal.SIGHUP)
    wait_for(lambda: "master.reload" in m.stderr(), message="the reload")

    def replaced() -> bool:
        kids = set(m.children())
        return len(kids) == 2 and not kids & old
    # The old generation serves until a new child is ready, then retires after its jobs.
    wait_for(replaced, timeout=15, message="two new children")
    after = enqueue(client, [("pid", None)] * 6)
    db.wait_status(running + after, timeout=15)
    for job_id in running:  # in flight during the HUP: finished by the old children
        assert db.job(job_id)["status"] == "succeeded"
        assert db.result(job_id)["pid"] in old
        assert [a["outcome"] for a in db.attempts(job_id)] == ["succeeded"]
    for job_id in after:
        assert db.job(job_id)["attempts"] == 1
        assert db.result(job_id)["pid"] not in old
    assert not any(live(p) for p in old)
    assert stop(m) == 0


def test_ttin_ttou_resize(master, client, db):
    m = master("-c", "2", ready=2)
    m.signal(signal.SIGTTIN)
    m.wait_children(3)
    wait_for(lambda: " c=3 " in title(m.pid), message="the title to say c=3")
    m.signal(signal.SIGTTOU)
    m.wait_children(2)
    m.signal(signal.SIGTTOU)
    [last] = m.wait_children(1)
    wait_for(lambda: " c=1 " in title(m.pid), message="the title to say c=1")
    m.signal(signal.SIGTTOU)  # never below one
    # A job round trip after the signal: the master has handled the TTOU by the time it ends.
    job_id = client.enqueue("pid").job.id
    db.wait_status(job_id, timeout=10)
    assert db.result(job_id)["pid"] == last
    assert m.children() == [last]
    assert " c=1 " in title(m.pid)
    assert stop(m) == 0


def test_children_ignore_sigint(master, client, db):
    m = master("-c", "1", ready=1)
    job_id = client.enqueue("ignore_int").job.id
    db.wait_status(job_id)
    assert db.result(job_id) is True
    [child] = m.children()
    os.kill(child, signal.SIGINT)
    follow = client.enqueue("pid").job.id  # run by the same child: it survived the ^C
    db.wait_status(follow)
    assert db.result(follow)["pid"] == child
    assert m.children() == [child]


def test_no_orphans_when_master_is_killed(master, client, db):
    m = master("-c", "3", ready=3)
    job_id = client.enqueue("sleep", 30).job.id
    db.wait_status(job_id, statuses=("leased",), timeout=10)
    kids = m.children()
    assert len(kids) == 3
    m.signal(signal.SIGKILL)
    m.wait(10)
    wait_for(lambda: not any(live(p) for p in kids), timeout=10,
             message="children to die with their master")


# --- start-up -------------------------------------------------------------------------------

def test_app_that_cannot_load_stops_the_master(master):
    m = master("-c", "2", app="tests.apps.does_not_exist")
    started = time.monotonic()
    assert m.wait(20) == 3
    assert time.monotonic() - started < 15
    err = m.stderr()
    assert "cannot load app 'tests.apps.does_not_exist'" in err
    assert "ModuleNotFoundError" in err
    assert "app.load_failed" in err
    assert err.count("cannot load app") <= 2  # one per initial child: no respawn loop


def test_master_never_forks_itself(master, client, db):
    """Children are fork+exec'd; under -W error::DeprecationWarning a fork of the threaded
    master (Python >= 3.12 warns) would fail. Respawns happen after the threads started."""
    m = master("-c", "2", python_args=("-W", "error::DeprecationWarning"), ready=2)
    ids = enqueue(client, [("noop", None)] * 5 + [("crash_once", None)])
    db.wait_status(ids, timeout=20)
    assert all(s == "succeeded" for s in db.statuses(ids).values())
    before = set(m.children())
    m.signal(signal.SIGHUP)  # a whole new generation, spawned by the running master
    wait_for(lambda: "master.reload" in m.stderr(), message="the reload")

    def new_generation() -> list[int] | None:
        # Not the old children: a retiring one closes its socket as it exits.
        kids = m.children()
        return kids if len(kids) == 2 and not set(kids) & before else None
    kids = wait_for(new_generation, timeout=20, message="two children of the new generation")
    # Python 3.11 does not warn about forking a threaded process, so look as well: a forked
    # child would share the master's sockets (libpq connections, its socketpair ends); an
    # exec'd one holds its own end of its socketpair and nothing of the master's.
    master_sockets = sockets(m.pid)
    assert len(master_sockets) >= 4  # claim, LISTEN, completer, heartbeat, pairs...
    for kid in kids:
        assert sockets(kid) and not sockets(kid) & master_sockets, (kid, sockets(kid))
    assert stop(m) == 0
    assert "DeprecationWarning" not in m.stderr()
    assert "Traceback" not in m.stderr()


# --- LISTEN/NOTIFY --------------------------------------------------------------------------

def test_listen_wakes_and_survives_a_dropped_connection(master, client, db, schema):
    m = master("-c", "1", "--poll-interval", "30", ready=1)

    def listener() -> int | None:
        rows = db.rows("SELECT pid FROM pg_stat_activity WHERE query = %s",
                       (f'LISTEN "{schema}_ready"',))
        return rows[0]["pid"] if len(rows) == 1 else None

    first = wait_for(listener, message="the master's LISTEN connection")
    # A 30 s poll floor cannot explain a start within 3 s: the notification did it.
    job_id = client.enqueue("noop").job.id
    db.wait_status(job_id, timeout=3)

    db.rows("SELECT pg_terminate_backend(%s)", (first,))
    # Enqueued while LISTEN is down: the reconnect wakes the claimer.
    lost = client.enqueue("noop").job.id
    db.wait_status(lost, timeout=5)
    second = wait_for(lambda: (lambda p: p if p and p != first else None)(listener()),
                      message="a new LISTEN connection")
    assert second != first
    # And notifications flow again on the new connection.
    again = client.enqueue("noop").job.id
    db.wait_status(again, timeout=3)
    err = m.stderr()
    assert "listen.lost" in err and "listen.reconnected" in err


def test_a_master_listens_on_one_connection(master, client, db, schema):
    """The claimer's channel and the scheduler's share one LISTEN connection: PostgreSQL wakes
    every listening backend of the database at each NOTIFY, whatever it listens to."""
    master("-c", "1", ready=1)
    db.wait_status(client.enqueue("noop").job.id, timeout=10)  # serving: every service started
    wait_for(lambda: db.rows("SELECT owner FROM {s}.scheduler_leader"),
             message="the scheduler leading (it has been running)")
    rows = db.rows("SELECT pid, query FROM pg_stat_activity WHERE query LIKE 'LISTEN %%'"
                   " AND query LIKE %s", (f"%{schema}%",))
    assert [r["query"] for r in rows] == [f'LISTEN "{schema}_ready"'], rows


def test_large_payloads_are_delivered(master, client, db):
    """Job frames larger than the socket buffer reach the child whole (the master writes them
    as the child reads, on the event loop): ten 500 KB payloads and a noop after them all run."""
    m = master("-c", "2", ready=2)
    big = "x" * (500 * 1024)
    ids = enqueue(client, [("noop", {"blob": big, "n": i}) for i in range(10)])
    after = client.enqueue("noop", "after").job.id
    db.wait_status(ids + [after], statuses=("succeeded",), timeout=30)
    for i, job_id in enumerate(ids):
        assert db.result(job_id)["payload"] == {"blob": big, "n": i}
        assert db.job(job_id)["attempts"] == 1
    assert len(m.children()) == 2
    assert stop(m) == 0

