"""Job versions: a change a user sees bumps it, bookkeeping (lease renewals, aging steps)
does not, an idempotent replay returns the job as it is now, and if_version guards cancel,
retry and delete through the Client and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import psycopg
import pytest

import jobrun
from jobrun.errors import Refused, StaleVersion
from jobrun.testing import wait_for
from jobrun.policy import RetryPolicy
from jobrun.worker.claimer import claim_params
from jobrun.worker.reaper import reap_params
from tests.invariants import nothing_lost

OWNER = "test-host:1:abc"


def version(client, job_id):
    return client.get(job_id).version


def execute(client, query, params):
    with client._connection().cursor() as cur:
        cur.execute(query, params)
        return cur.fetchall() if cur.description else cur.rowcount


def claim(client):
    return execute(client, client.queries.claim_jobs,
                   claim_params(["default"], 10, OWNER, 30))


def complete(client, job_id, token, status, outcome):
    return execute(client, client.queries.complete_jobs, {
        "ids": [job_id], "tokens": [token], "statuses": [status], "outcomes": [outcome],
        "delays": [0.0], "errors": [None], "tracebacks": [None], "results": [None],
        "children": [1], "crashed": [0], "logs": [None], "refunds": [0],
        "owner": OWNER, "host": "test-host", "pid": 1})


def heartbeat(client, job_id, token):
    return execute(client, client.queries.heartbeat, {"ttl": 30, "ids": [job_id],
                                                      "tokens": [token], "owner": OWNER})


def test_every_change_a_user_sees_bumps_the_version(client):
    q = client.queries
    job = client.enqueue("t.v").job
    assert job.version == 0
    [row] = claim(client)
    assert version(client, job.id) == 1
    assert heartbeat(client, job.id, row["lease_token"]) == [{"id": job.id,
                                                               "cancel_requested": False}]
    assert version(client, job.id) == 1  # a lease renewal is bookkeeping
    execute(client, q.unclaim, {"ids": [job.id], "tokens": [row["lease_token"]], "owner": OWNER})
    assert version(client, job.id) == 2
    [row] = claim(client)
    complete(client, job.id, row["lease_token"], "dead", "failed")
    assert version(client, job.id) == 4
    client.retry(job.id)
    assert version(client, job.id) == 5
    [row] = claim(client)
    execute(client, "UPDATE {}.jobs SET lease_expires_at = now() - interval '1 s' WHERE id = %s"
            .replace("{}", f'"{client.settings.schema}"'), [job.id])
    execute(client, q.reap_expired, reap_params(10, {}, RetryPolicy(0.0, 2.0, 1.0)))
    assert version(client, job.id) == 7  # the claim and the reaper (not the test's update)
    [row] = claim(client)
    execute(client, q.complete_transactional, {
        "id": job.id, "token": row["lease_token"], "owner": OWNER, "host": "h", "pid": 1,
        "child": 1, "result": None, "log": None})
    assert version(client, job.id) == 9
    other = client.enqueue("t.v").job
    client.cancel(other.id)
    assert version(client, other.id) == 1


def test_heartbeats_and_aging_leave_the_version_a_guarded_cancel_read(client):
    """A version read from a running job, and from a queued one, still guards a cancel after
    several lease renewals and an aging step: neither is a change the user sees."""
    client.queue_add("aged", aging="1m")
    running = client.enqueue("t.run").job
    [row] = claim(client)
    read = client.get(running.id)
    waiting = client.enqueue("t.wait", queue="aged", priority=10).job
    execute(client, 'UPDATE "{}".jobs SET run_at = now() - interval \'150 s\' WHERE id = %s'
            .format(client.settings.schema), [waiting.id])
    read_waiting = client.get(waiting.id)
    for _ in range(3):
        assert len(heartbeat(client, running.id, row["lease_token"])) == 1
    aged = execute(client, client.queries.age_queued, {"queues": ["aged"], "batch": 10,
                                                        "start": -100})
    assert aged == [{"queue": "aged", "level": 10}]
    now = client.get(waiting.id)
    assert (now.priority, now.base_priority) == (8, 10)  # two steps taken
    assert client.get(running.id).lease_expires_at > read.lease_expires_at  # renewed
    assert client.get(running.id).version == read.version == 1
    assert now.version == read_waiting.version == 0
    assert client.cancel(running.id, if_version=read.version).cancel_requested is True
    assert client.cancel(waiting.id, if_version=read_waiting.version).status == "cancelled"


def test_a_replay_returns_the_job_as_it_is_now(client):
    """An idempotent replay answers with the stored row as it is: its version, lease token
    and times, and the version it gives guards the next change."""
    first = client.enqueue("t.r", {"n": 1}, idempotency_key="k-1")
    assert first.created and first.job.version == 0 and first.job.lease_token == 0
    [row] = claim(client)
    again = client.enqueue("t.r", {"n": 1}, idempotency_key="k-1")
    now = client.get(first.job.id)
    assert not again.created and again.job == now  # every field, payload included
    assert (again.job.version, again.job.lease_token, again.job.status) == (1, 1, "leased")
    assert again.job.started_at is not None and again.job.lease_owner == OWNER
    complete(client, now.id, row["lease_token"], "dead", "failed")
    dead = client.enqueue("t.r", {"n": 1}, idempotency_key="k-1").job
    assert (dead.status, dead.version) == ("dead", 2) and dead.finished_at is not None
    assert client.retry(dead.id, if_version=dead.version).version == 3
    fresh = client.enqueue("t.r", {"n": 2}, idempotency_key="k-2", concurrency_key="c")
    assert fresh.created and fresh.job == client.get(fresh.job.id)


def test_if_version_guards_the_client(client):
    job = client.enqueue("t.g").job
    with pytest.raises(StaleVersion) as stale:
        client.cancel(job.id, if_version=3)
    assert stale.value.current.version == 0 and stale.value.current.status == "queued"
    assert client.cancel(job.id, if_version=0).status == "cancelled"
    with pytest.raises(StaleVersion):
        client.retry(job.id, if_version=0)
    assert client.retry(job.id, if_version=1).status == "queued"
    with pytest.raises(Refused):
        client.delete(job.id)
    client.cancel(job.id)
    with pytest.raises(StaleVersion):
        client.delete(job.id, if_version=2)
    assert client.delete(job.id, if_version=3).id == job.id
    with pytest.raises(jobrun.NotFound):
        client.get(job.id)
    with pytest.raises(jobrun.InvalidInput):
        client.cancel(job.id, if_version=-1)


def test_if_version_on_the_command_line(client, db_env):
    job = client.enqueue("t.cli").job

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "jobrun", *args], env=db_env,
                              capture_output=True, text=True, timeout=120)

    stale = cli("cancel", str(job.id), "--if-version", "4")
    assert stale.returncode == 1 and "version 0, not 4" in stale.stderr
    assert "Traceback" not in stale.stderr
    done = cli("cancel", str(job.id), "--if-version", "0")
    assert done.returncode == 0 and json.loads(done.stdout)["version"] == 1
    gone = cli("delete", str(job.id), "--if-version", "1")
    assert gone.returncode == 0 and json.loads(gone.stdout)["id"] == job.id
    assert cli("retry", str(job.id)).returncode == 1


def test_the_invariant_holds_through_renewals_and_sees_a_version_bookkeeping_moved(client):
    """tests/invariants.py's version rule passes after claims, renewals, a cancel and a
    completion through the real statements, and fails on a version bumped as the heartbeat
    once bumped it."""
    conn, schema = client._connection(), client.settings.schema
    job = client.enqueue("t.i").job
    [row] = claim(client)
    for _ in range(5):
        heartbeat(client, job.id, row["lease_token"])
    client.cancel(job.id)
    complete(client, job.id, row["lease_token"], "cancelled", "cancelled")
    queued = client.enqueue("t.i").job
    client.cancel(queued.id)
    assert client.get(job.id).version == 3 and nothing_lost(conn, schema) == []
    running = client.enqueue("t.i").job
    [row] = claim(client)
    execute(client, f'UPDATE "{schema}".jobs SET version = version + 1 WHERE id = %s',
            [running.id])  # a renewal that bumped it, as the heartbeat did
    assert nothing_lost(conn, schema) == []  # one step over: still within 2 per claim
    execute(client, f'UPDATE "{schema}".jobs SET version = version + 1 WHERE id = %s',
            [running.id])
    assert nothing_lost(conn, schema) == [("version moved without a change a user sees",
                                           running.id)]


def test_a_replay_of_a_job_committed_while_it_waited_reads_the_job(client, pg_dsn):
    """The enqueue statement's snapshot predates a job another transaction commits while the
    statement waits on its key: the replay reads the job again rather than answer defaults."""
    schema = client.settings.schema
    with psycopg.connect(pg_dsn) as other, psycopg.connect(pg_dsn, autocommit=True) as watch:
        other.execute(f'INSERT INTO "{schema}".jobs (queue, task, payload, idempotency_key)'
                      " VALUES ('default', 't.race', '1', 'k-race')")
        replay: list = []
        waiter = threading.Thread(target=lambda: replay.append(
            client.enqueue("t.race", 1, idempotency_key="k-race")))
        waiter.start()
        wait_for(lambda: watch.execute(  # the enqueue waits for the inserting transaction
            "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
        ).fetchone()[0] == 1, timeout=10, message="the enqueue to wait on the uncommitted key")
        other.execute(f'UPDATE "{schema}".jobs SET version = 5, lease_token = 2'
                      " WHERE idempotency_key = 'k-race'")
        other.commit()
        waiter.join(timeout=10)
    [got] = replay
    assert not got.created and (got.job.version, got.job.lease_token) == (5, 2)
    assert got.job == client.get(got.job.id)
