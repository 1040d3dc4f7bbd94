"""A job shows the attempt limit that applied: a task declared with a lower max_attempts than
its job was enqueued with ends the job at the task's limit, and `jobrun list`, `jobrun get`
and the job read as `1/1`, not `1/5` (tests/apps/obsapp.py: boom has max_attempts=1). A real
master, the real command line, a real PostgreSQL."""

from __future__ import annotations

from tests.cliproc import ok, ok_json, run

APP = "tests.apps.obsapp"


def test_a_task_limit_lower_than_the_jobs_is_the_one_shown(master, client, db, db_env):
    capped = client.enqueue("boom", max_attempts=5).job.id
    own = client.enqueue("chatty", max_attempts=5).job.id  # no task limit: keeps its own
    master("-c", "1", app=APP, ready=1)
    db.wait_status([capped, own], timeout=30)
    job = ok_json(run(db_env, "get", str(capped)))
    assert (job["status"], job["attempts"], job["max_attempts"]) == ("dead", 1, 1)
    rows = {ln.split()[0]: ln.split() for ln in ok(run(db_env, "list")).splitlines()[2:]
            if ln.strip()}
    assert rows[str(capped)][3:5] == ["dead", "1/1"]
    assert rows[str(own)][3:5] == ["succeeded", "1/5"]
