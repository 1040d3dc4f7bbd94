"""How children start (docs/spawning.md), end to end: a real master, its fork server, real
children and signals. ``--spawn fork`` is the default, so the rest of the acceptance suite runs
under it too; these tests pin what is particular to it, and that ``--spawn exec`` still works.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from jobrun.testing import wait_for

from tests.dbview import enqueue
from tests.masterproc import ROOT, live, title

APP = "tests.apps.spawnapp"


def infos(client, db, n: int, timeout: float = 30.0) -> list[dict]:
    ids = enqueue(client, [("spawn.info", None)] * n)
    db.wait_status(ids, timeout=timeout)
    return [db.result(i) for i in ids]


def one_forkserver(m) -> int:
    found = wait_for(lambda: m.forkservers(), timeout=15, message="a fork server")
    assert len(found) == 1, found
    return found[0]


def test_forked_children_run_jobs_and_are_the_masters_own(master, client, db):
    m = master("-c", "2", app=APP, ready=2)
    server = one_forkserver(m)
    assert title(server).startswith(f"jobrun-forkserver: {APP}")
    results = infos(client, db, 6)
    kids = set(m.children())
    for r in results:
        assert r["imported_by"] == server  # the app was imported once, by the fork server
        assert r["ppid"] == m.pid  # yet the child is the master's own
        assert r["pid"] in kids and r["pid"] != server
    assert all(title(p).startswith("jobrun-child ") for p in kids)


def test_max_tasks_per_child_1_forks_a_fresh_child_per_job(master, client, db):
    m = master("-c", "2", "--max-tasks-per-child", "1", app=APP, ready=2)
    server = one_forkserver(m)
    results = infos(client, db, 20)
    assert len({r["pid"] for r in results}) == 20
    assert {r["imported_by"] for r in results} == {server}
    assert {r["ppid"] for r in results} == {m.pid}
    # Each forked child draws its own numbers: the fork server's random state is not shared.
    assert len({r["random"] for r in results}) == 20
    wait_for(lambda: len(m.children()) == 2, timeout=15, message="two live children")


def test_children_that_run_one_job_each_are_claimed_one_job_each(master, client, db):
    """With --max-tasks-per-child 1 a child can hold no job behind its one: a claim sized for
    more took rows only to give them back, and the claimer then took the queue for dry and
    waited out its poll floor (about 10 jobs/s instead of hundreds)."""
    m = master("-c", "2", "--max-tasks-per-child", "1", app=APP, ready=2)
    one_forkserver(m)
    ids = enqueue(client, [("spawn.info", None)] * 40)
    db.wait_status(ids, timeout=60)
    assert set(db.statuses(ids).values()) == {"succeeded"}
    m.signal(signal.SIGTERM)
    assert m.wait() == 0
    # Every row a claim took was a job a child ran: none claimed twice, none given back.
    claimed = [int(n) for n in re.findall(r"master\.stopped .*?claimed=(\d+)", m.stderr())]
    assert claimed == [40], m.stderr()[-2000:]


def test_a_recycled_childs_successor_stands_by_and_one_job_runs_at_a_time(master, client, db):
    m = master("-c", "1", "--max-tasks-per-child", "1", app=APP, ready=1)
    one_forkserver(m)
    ids = enqueue(client, [("spawn.window", 0.4)] * 4)
    # While a child runs its last job, its successor is forked and waits, ready and idle.
    wait_for(lambda: len(m.children()) == 2 and len(m.idle_children()) == 1, timeout=20,
             message="a child running its job beside its standby successor")
    db.wait_status(ids, timeout=60)
    runs = sorted((db.result(i) for i in ids), key=lambda r: r["start"])
    assert len({r["pid"] for r in runs}) == 4  # a fresh child each
    for before, after in zip(runs, runs[1:]):  # -c 1: never two jobs at once
        assert before["end"] <= after["start"], (before, after)
    wait_for(lambda: len(m.children()) == 1, timeout=15, message="one child left")


@pytest.fixture
def hangup_and_quit_ignored():
    """Masters started as by ``nohup jobrun-master &`` from a shell: SIGHUP and SIGQUIT ignored
    from the start (the master installs its own handlers later, its fork server before that)."""
    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGHUP, signal.SIGQUIT)}
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def test_a_forked_child_has_the_signals_of_an_exec_child(master, client, db,
                                                         hangup_and_quit_ignored):
    forked = master("-c", "1", app=APP, ready=1)
    [f] = infos(client, db, 1)
    assert f["imported_by"] == one_forkserver(forked) != f["pid"]
    forked.kill_tree()
    m = master("-c", "1", "--spawn", "exec", app=APP, ready=1)
    [e] = infos(client, db, 1)
    assert e["imported_by"] == e["pid"]  # exec'd: the child imported the app itself
    assert not m.forkservers()
    assert f["signals"] == e["signals"]
    assert f["blocked"] == e["blocked"] == []
    assert (f["signals"]["SIGINT"], f["signals"]["SIGUSR1"]) == ("ignore", "handler")


@pytest.mark.parametrize("how,status", [("exit", "exited with code 7"),
                                        ("sigkill", "killed by SIGKILL")])
def test_a_forked_child_that_dies_mid_job_is_worker_lost(master, client, db, how, status):
    m = master("-c", "1", app=APP, ready=1)
    server = one_forkserver(m)
    [victim] = m.children()
    job = client.enqueue("crash", {"how": how}, max_attempts=1).job
    db.wait_status(job.id)
    [attempt] = db.attempts(job.id)
    assert attempt["outcome"] == "worker_lost"
    assert status in attempt["error"]
    assert not live(victim)
    [r] = infos(client, db, 1)  # its replacement, forked by the same server
    assert r["pid"] != victim and r["imported_by"] == server and r["ppid"] == m.pid


def test_the_fork_server_killed_under_load_loses_no_job(master, client, db):
    m = master("-c", "2", "--max-tasks-per-child", "1", app=APP, ready=2)
    server = one_forkserver(m)
    ids = enqueue(client, [("sleep", 0.02)] * 40)
    wait_for(lambda: db.count("status = 'succeeded'") >= 5, timeout=30, message="some jobs done")
    os.kill(server, signal.SIGKILL)
    db.wait_status(ids, timeout=60)
    assert set(db.statuses(ids).values()) == {"succeeded"}
    # Children are the master's: the server's death interrupted no job (no attempt burnt).
    assert all(db.job(i)["attempts"] == 1 for i in ids)
    err = m.stderr()
    assert "forkserver.died" in err and "child.lost" not in err
    new = wait_for(lambda: [p for p in m.forkservers() if p != server], timeout=20,
                   message="a new fork server")
    assert len(new) == 1
    wait_for(lambda: m.stderr().count("forkserver.ready") >= 2, timeout=20,
             message="the new fork server ready")
    results = infos(client, db, 4)
    assert results[-1]["imported_by"] == new[0]
    # Each job's child exits after it and a successor takes its slot: the pool is whole again
    # once the last one's successor is up (not necessarily at the moment the result is read).
    wait_for(lambda: len(m.children()) == 2, timeout=20, message="two children again")
    m.signal(signal.SIGTERM)
    assert m.wait(20) == 0


def test_hup_starts_a_fork_server_with_the_new_code(master, client, db, db_env, tmp_path):
    version = tmp_path / "version"
    version.write_text("v1")
    env = {**db_env, "SPAWNAPP_VERSION_FILE": str(version)}
    m = master("-c", "2", app=APP, env=env, ready=2)
    old_server = one_forkserver(m)
    old_children = set(m.children())
    assert {r["version"] for r in infos(client, db, 2)} == {"v1"}
    version.write_text("v2")
    m.signal(signal.SIGHUP)
    new_server = wait_for(lambda: [p for p in m.forkservers() if p != old_server], timeout=20,
                          message="a new fork server")[0]
    wait_for(lambda: not live(old_server), timeout=20, message="the old fork server retired")
    wait_for(lambda: len(m.children()) == 2 and not set(m.children()) & old_children,
             timeout=20, message="the new generation")
    results = infos(client, db, 4)
    assert {r["version"] for r in results} == {"v2"}
    assert {r["imported_by"] for r in results} == {new_server}
    assert "reload.failed" not in m.stderr()


def test_a_reload_whose_code_does_not_import_keeps_the_old_fork_server(master, client, db,
                                                                         db_env, tmp_path):
    flag = tmp_path / "broken"
    env = {**db_env, "SPAWNAPP_BROKEN_IF": str(flag)}
    m = master("-c", "2", app=APP, env=env, ready=2)
    server = one_forkserver(m)
    children = set(m.children())
    flag.write_text("yes")
    m.signal(signal.SIGHUP)
    wait_for(lambda: "reload.failed" in m.stderr(), timeout=20, message="reload.failed")
    assert "spawnapp is broken on purpose" in m.stderr()
    assert m.forkservers() == [server] and set(m.children()) == children
    results = infos(client, db, 4)
    assert {r["imported_by"] for r in results} == {server}
    flag.unlink()  # fixed: the next SIGHUP goes through
    m.signal(signal.SIGHUP)
    wait_for(lambda: m.forkservers() and server not in m.forkservers(), timeout=20,
             message="a new fork server")
    assert m.running()


def test_spawn_exec_starts_no_fork_server(master, client, db):
    m = master("-c", "2", "--spawn", "exec", "--max-tasks-per-child", "1", app=APP, ready=2)
    results = infos(client, db, 6)
    assert all(r["imported_by"] == r["pid"] and r["ppid"] == m.pid for r in results)
    assert not m.forkservers()


def test_a_bad_spawn_mode_is_a_usage_error(db_env):
    proc = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "-A", APP, "--spawn", "thread"],
                          env={**db_env, "PYTHONPATH": str(ROOT)}, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "--spawn is one of fork, exec; not 'thread'" in proc.stderr


def test_the_fork_server_and_its_children_die_with_the_master(master, client, db):
    m = master("-c", "2", app=APP, ready=2)
    server = one_forkserver(m)
    kids = m.children()
    os.kill(m.pid, signal.SIGKILL)
    wait_for(lambda: not any(live(p) for p in [server, *kids]), timeout=15,
             message="the fork server and the children to die with the master")
