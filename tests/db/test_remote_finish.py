"""remote_finish (jobrun/sql/remote.sql), the one statement by which the worker protocol ends
a remote worker's attempts, against a real PostgreSQL: it decides each fate as
policy.decide would and goes through finish_jobs, so limits are released and attempt rows
written as for a master; a report under a stale token or another owner changes nothing."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from jobrun.policy import DEFAULT_RETRY
from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params

OWNER = "remote:test:0123456789abcdef"


def finish(conn, schema, rows, owner=OWNER):
    """rows: (id, token, kind, permanent, delay) each; the ids accepted."""
    q = for_schema(schema)
    n = len(rows)
    return {r["job_id"] for r in conn.execute(q.remote_finish, {
        "ids": [r[0] for r in rows], "tokens": [r[1] for r in rows],
        "kinds": [r[2] for r in rows], "permanents": [r[3] for r in rows],
        "delays": [r[4] for r in rows], "errors": ["e"] * n, "tracebacks": [None] * n,
        "results": ["{\"ok\": 1}"] * n, "logs": [None] * n, "owner": owner,
        "base": DEFAULT_RETRY.base, "factor": DEFAULT_RETRY.factor, "cap": DEFAULT_RETRY.cap,
    }).fetchall() if r["accepted"]}


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def claim(conn, schema, queue, n):
    return {r["id"]: r for r in conn.execute(for_schema(schema).claim_jobs,
                                             claim_params([queue], n, OWNER, 60)).fetchall()
            if r["id"] is not None}


def test_fates_as_a_master_decides_them(conn, schema, client):
    ids = [client.enqueue("t", i, max_attempts=2).job.id for i in range(5)]
    got = claim(conn, schema, "default", 5)
    ok, hinted, backoff, permanent, released = ids
    assert finish(conn, schema, [
        (ok, got[ok]["lease_token"], "succeeded", False, None),
        (hinted, got[hinted]["lease_token"], "failed", False, 500.0),
        (backoff, got[backoff]["lease_token"], "retry", False, None),
        (permanent, got[permanent]["lease_token"], "failed", True, None),
        (released, got[released]["lease_token"], "released", False, None)]) == set(ids)
    jobs = {i: client.get(i) for i in ids}
    assert jobs[ok].status == "succeeded"
    assert client.attempts(ok)[0].result == {"ok": 1}
    assert client.attempts(ok)[0].worker_host == OWNER
    assert jobs[hinted].status == "queued"
    assert 490 < (jobs[hinted].run_at - jobs[hinted].started_at).total_seconds() < 510
    assert jobs[backoff].status == "queued"
    assert (jobs[backoff].run_at - jobs[backoff].started_at).total_seconds() <= \
        DEFAULT_RETRY.ceiling(1) + 1
    assert jobs[permanent].status == "dead"
    assert jobs[released].status == "queued" and jobs[released].attempts == 0
    # The second attempt of a job at its max_attempts fails: dead, not queued.
    conn.execute(f'UPDATE "{schema}".jobs SET run_at = now() WHERE id = %s', [backoff])
    again = claim(conn, schema, "default", 5)
    assert finish(conn, schema, [(backoff, again[backoff]["lease_token"], "failed", False, 0.0)]) \
        == {backoff}
    assert client.get(backoff).status == "dead"


def test_stale_token_or_another_owner_changes_nothing(conn, schema, client):
    job = client.enqueue("t").job.id
    token = claim(conn, schema, "default", 1)[job]["lease_token"]
    before = client.get(job)
    assert finish(conn, schema, [(job, token + 1, "succeeded", False, None)]) == set()
    assert finish(conn, schema, [(job, token, "succeeded", False, None)],
                  owner="remote:other:0123456789abcdef") == set()
    assert client.get(job) == before and client.attempts(job) == []
    assert finish(conn, schema, [(job, token, "succeeded", False, None)]) == {job}
    assert finish(conn, schema, [(job, token, "failed", False, None)]) == set()  # twice: no
    assert len(client.attempts(job)) == 1


def test_one_stale_lease_finishes_none_of_the_call(conn, schema, client):
    a, b = (client.enqueue("t", i).job.id for i in range(2))
    got = claim(conn, schema, "default", 2)
    assert finish(conn, schema, [(a, got[a]["lease_token"], "succeeded", False, None),
                                 (b, got[b]["lease_token"] + 1, "succeeded", False, None)]) == set()
    assert client.get(a).status == "leased" and client.attempts(a) == []
    assert finish(conn, schema, [(a, got[a]["lease_token"], "succeeded", False, None)]) == {a}


def test_limits_are_released_as_for_a_master(conn, schema, client):
    client.queue_add("capped", concurrency=1, key_concurrency=1)
    first = client.enqueue("t", queue="capped", concurrency_key="k").job.id
    second = client.enqueue("t", queue="capped", concurrency_key="k").job.id
    got = claim(conn, schema, "capped", 2)
    assert list(got) == [first]
    assert claim(conn, schema, "capped", 2) == {}  # held by the queue's concurrency and the key
    assert finish(conn, schema, [(first, got[first]["lease_token"], "succeeded", False, None)]) \
        == {first}
    assert list(claim(conn, schema, "capped", 2)) == [second]


def test_the_checker_names_each_broken_rule(conn, schema, client):
    """tests/invariants.py's remote_attempts can fail: a database that breaks each rule."""
    from tests.invariants import remote_attempts

    named, beyond, missing, fine = (client.enqueue("t", i).job.id for i in range(4))
    got = claim(conn, schema, "default", 4)
    assert finish(conn, schema, [(i, got[i]["lease_token"], "succeeded", False, None)
                                 for i in (named, beyond, missing, fine)]) == set(got)
    s = f'"{schema}"'
    conn.execute(f"UPDATE {s}.job_attempts SET worker_pid = 7 WHERE job_id = %s", [named])
    conn.execute(f"UPDATE {s}.job_attempts SET lease_token = 99 WHERE job_id = %s", [beyond])
    conn.execute(f"UPDATE {s}.jobs SET lease_token = lease_token + 1 WHERE id = %s", [missing])
    found = remote_attempts(conn, schema)
    assert sorted(found) == sorted([
        ("remote attempt not naming its worker", named),
        ("attempt under a token never issued", beyond),
        ("remote job finished without its attempt", beyond),
        ("remote job finished without its attempt", missing)])
