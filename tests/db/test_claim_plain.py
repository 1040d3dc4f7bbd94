"""claim_plain, the lean claim of a master serving one queue without -Q limits, against a real
PostgreSQL: where it applies it leases what claim_jobs leases from the same state; where the
queue has a concurrency or rate limit, or a keyed job is among the jobs it would take, it
leases nothing and says so with one marker row (held = 'full'); a paused or undeclared queue
gives no rows at all. Its estimated cost stays flat with the depth of the queue, as the
claim's does (tests/db/test_claim_cost.py)."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params, plain_claim_params

from tests.profiles import examples

pytestmark = pytest.mark.db

OWNER = "plain-test-owner"
TTL = 30.0
Q = "plainq"
OTHER = "otherq"
# Offsets of run_at from the insert's now(), in seconds: runnable (<= 0) or not yet (> 0),
# from a small set so that ties on run_at (broken by id) come up.
OFFSETS = (-3600, -60, -1, 0, 60, 3600)
NOT_QUEUED = ("leased", "succeeded", "dead", "cancelled")
RETURNED = ("id", "lease_token", "task", "queue", "attempts", "max_attempts", "crashes",
            "priority", "idempotency_key", "traceparent", "created_at", "waited", "payload",
            "held", "retry")


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def t(schema: str, table: str) -> sql.Identifier:
    return sql.Identifier(schema, table)


def set_queue(conn, schema: str, name: str, **settings) -> None:
    """Declare ``name`` if need be and set its columns by plain SQL, as an operator would."""
    conn.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s) ON CONFLICT DO NOTHING").format(
        t(schema, "queues")), [name])
    if settings:
        sets = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v))
                                  for k, v in settings.items())
        conn.execute(sql.SQL("UPDATE {} SET {}, version = version + 1 WHERE name = %s").format(
            t(schema, "queues"), sets), [name])


def plain(conn, schema: str, queue: str, limit: int, owner: str = OWNER) -> list[dict]:
    return conn.execute(for_schema(schema).claim_plain,
                        plain_claim_params(queue, limit, owner, TTL)).fetchall()


def full(conn, schema: str, queue: str, limit: int, owner: str = OWNER) -> list[dict]:
    return conn.execute(for_schema(schema).claim_jobs,
                        claim_params([queue], limit, owner, TTL)).fetchall()


def is_marker(rows: list[dict], queue: str) -> bool:
    """Whether ``rows`` is exactly claim_plain's marker: one row, NULL id, held 'full'."""
    if not any(r["id"] is None for r in rows):
        return False
    assert len(rows) == 1, rows  # the marker comes alone: nothing leased beside it
    (row,) = rows
    assert list(row) == list(RETURNED), row
    assert row == {**dict.fromkeys(RETURNED), "queue": queue, "held": "full"}, row
    return True


def state(conn, schema: str) -> dict:
    """The tables a claim writes, as read in the open transaction; times written by a claim
    (now(), now() + ttl) shown as such, so states read in two transactions compare."""
    jobs = conn.execute(sql.SQL(
        "SELECT id, queue, task, payload, status, priority, run_at, attempts, max_attempts,"
        " crashes, idempotency_key, lease_owner, lease_token, cancel_requested, traceparent,"
        " created_at, finished_at, version, counted, concurrency_key,"
        " CASE WHEN started_at = now() THEN 'now' ELSE started_at::text END AS started_at,"
        " CASE WHEN lease_expires_at = now() + make_interval(secs => %s) THEN 'now+ttl'"
        "      ELSE lease_expires_at::text END AS lease_expires_at"
        " FROM {} ORDER BY id").format(t(schema, "jobs")), [TTL]).fetchall()
    keys = conn.execute(sql.SQL("SELECT * FROM {} ORDER BY queue, key, slot").format(
        t(schema, "key_leases"))).fetchall()
    claims = conn.execute(sql.SQL("SELECT queue, taken, starts_at::text, starts_n,"
                                  " last_claim_at::text FROM {} ORDER BY queue").format(
        t(schema, "queue_claims"))).fetchall()
    return {"jobs": jobs, "key_leases": keys, "queue_claims": claims}


def in_rollback(conn, schema: str, fn):
    """fn(conn) in a transaction that is rolled back; (its value, the state after it, the
    transaction's now() as epoch seconds)."""
    with conn.transaction(force_rollback=True):
        now = conn.execute("SELECT extract(epoch FROM now())::float8 AS e").fetchone()["e"]
        out = fn(conn)
        return out, state(conn, schema), now


def insert(conn, schema: str, queue: str, *, priority: int = 0, offset: float = -1,
           status: str = "queued", key: str | None = None) -> int:
    return conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, payload, priority, run_at, status, concurrency_key,"
        " idempotency_key, traceparent, lease_owner, lease_token, lease_expires_at, started_at)"
        " VALUES (%(queue)s, 't', jsonb_build_object('p', %(priority)s), %(priority)s,"
        " now() + make_interval(secs => %(offset)s), %(status)s::text, %(key)s,"
        " 'idem-' || gen_random_uuid(), '00-trace',"
        " CASE WHEN %(status)s = 'leased' THEN 'someone' END,"
        " CASE WHEN %(status)s = 'queued' THEN 0 ELSE 1 END,"
        " CASE WHEN %(status)s = 'leased' THEN now() + interval '1 minute' END,"
        " CASE WHEN %(status)s = 'queued' THEN NULL ELSE now() - interval '1 minute' END)"
        " RETURNING id").format(t(schema, "jobs")),
        {"queue": queue, "priority": priority, "offset": float(offset), "status": status,
         "key": key}).fetchone()["id"]


def lease_ids(rows: list[dict]) -> list[int]:
    return sorted(r["id"] for r in rows if r["id"] is not None)


def assert_same_rows(plain_rows, plain_now, full_rows, full_now) -> None:
    """claim_plain's leased rows equal claim_jobs', column for column; `waited` (now() -
    run_at) is each statement's own now(): it differs exactly by the gap between the two."""
    a = sorted((r for r in plain_rows if r["id"] is not None), key=lambda r: r["id"])
    b = sorted((r for r in full_rows if r["id"] is not None), key=lambda r: r["id"])
    assert [list(r) for r in a] == [list(RETURNED)] * len(a)
    assert [list(r) for r in b] == [list(RETURNED)] * len(b)
    strip = lambda r: {k: v for k, v in r.items() if k != "waited"}  # noqa: E731
    assert [strip(r) for r in a] == [strip(r) for r in b]
    for x, y in zip(a, b):  # now - waited is run_at: the same for both
        assert abs((plain_now - x["waited"]) - (full_now - y["waited"])) < 1e-4, (x, y)


# --- the property: claim_plain is claim_jobs where it applies, a marker where not ---------

@st.composite
def cases(draw):
    keyed = draw(st.booleans())
    job = st.tuples(
        st.one_of(st.integers(-100, 100), st.sampled_from((-1, 0, 1))),  # ties come up too
        st.sampled_from(OFFSETS),
        st.sampled_from(("queued",) * 4 + NOT_QUEUED),
        st.sampled_from(("a", "b")) if keyed else st.none(),
        st.sampled_from((Q,) * 5 + (OTHER,)),
    )
    jobs = draw(st.lists(job, min_size=draw(st.integers(0, 12)), max_size=14))
    limit = draw(st.integers(1, 10))
    queue_limit = draw(st.sampled_from((None,) * 6 + ("concurrency", "rate")))
    key_concurrency = draw(st.integers(1, 2))
    return jobs, limit, queue_limit, key_concurrency


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_claim_plain_leases_what_claim_jobs_leases_or_says_it_does_not_apply(conn, schema, case):
    jobs, limit, queue_limit, key_concurrency = case
    set_queue(conn, schema, OTHER)
    set_queue(conn, schema, Q, concurrency=2 if queue_limit == "concurrency" else None,
              rate_limit=5 if queue_limit == "rate" else None,
              rate_period="1 minute" if queue_limit == "rate" else None,
              key_concurrency=key_concurrency)
    try:
        made = []
        with conn.transaction():  # one now() for all: run_at ties come up
            for priority, offset, status, key, queue in jobs:
                job_id = insert(conn, schema, queue, priority=priority, offset=offset,
                                status=status, key=key)
                made.append((job_id, priority, offset, status, key, queue))
                if status == "leased" and key is not None:  # a running keyed job holds a slot
                    conn.execute(sql.SQL(
                        "INSERT INTO {} (queue, key, slot, job_id) SELECT %s, %s, coalesce("
                        "(SELECT max(slot) + 1 FROM {} WHERE queue = %s AND key = %s), 0), %s")
                        .format(t(schema, "key_leases"), t(schema, "key_leases")),
                        [queue, key, queue, key, job_id])
        runnable = sorted((m for m in made if m[5] == Q and m[3] == "queued" and m[2] <= 0),
                          key=lambda m: (m[1], m[2], m[0]))
        head = runnable[:limit]
        applies = queue_limit is None and all(m[4] is None for m in head)

        _, before, _ = in_rollback(conn, schema, lambda c: None)
        p_rows, p_state, p_now = in_rollback(conn, schema, lambda c: plain(c, schema, Q, limit))
        f_rows, f_state, f_now = in_rollback(conn, schema, lambda c: full(c, schema, Q, limit))

        if is_marker(p_rows, Q):
            event("marker: " + ("queue limit" if queue_limit else "keyed job"))
            assert not applies, (case, p_rows)
            assert p_state == before  # leased nothing, took no key, touched no counter
            assert queue_limit is not None or any(m[4] is not None for m in head)
        else:
            event("leased " + ("none" if not head else "some"))
            assert applies, (case, p_rows, f_rows)
            assert lease_ids(p_rows) == sorted(m[0] for m in head)
            assert lease_ids(f_rows) == lease_ids(p_rows)
            assert all(r["held"] is None for r in f_rows), f_rows
            assert_same_rows(p_rows, p_now, f_rows, f_now)
            assert p_state == f_state  # the same writes, column for column
            leased = {r["id"]: r for r in p_state["jobs"] if r["id"] in lease_ids(p_rows)}
            old = {r["id"]: r for r in before["jobs"]}
            for job_id, r in leased.items():
                assert (r["status"], r["counted"], r["lease_owner"]) == ("leased", False, OWNER)
                assert (r["attempts"], r["lease_token"], r["version"]) == (
                    old[job_id]["attempts"] + 1, old[job_id]["lease_token"] + 1,
                    old[job_id]["version"] + 1)
                assert (r["started_at"], r["lease_expires_at"]) == ("now", "now+ttl")
            untouched = lambda s: [r for r in s["jobs"] if r["id"] not in leased]  # noqa: E731
            assert untouched(p_state) == untouched(before)
    finally:
        conn.execute(sql.SQL("DELETE FROM {}").format(t(schema, "key_leases")))
        conn.execute(sql.SQL("DELETE FROM {}").format(t(schema, "jobs")))


# --- examples ------------------------------------------------------------------------------

def count(conn, schema: str, where: str = "true") -> int:
    return conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE " + where).format(
        t(schema, "jobs"))).fetchone()["n"]


def test_a_plain_queue_is_leased_in_claim_order_uncounted(conn, client, schema):
    client.queue_add(Q)
    # (priority, run_at offset): by priority, then run_at (not id), then id.
    ids = [insert(conn, schema, Q, priority=p, offset=o)
           for p, o in ((5, -1), (0, -1), (0, -60), (-3, -1), (0, -60), (7, -3600))]
    with conn.transaction(force_rollback=True):
        expected = lease_ids(full(conn, schema, Q, 3))
    rows = plain(conn, schema, Q, 3)
    assert lease_ids(rows) == expected == sorted([ids[3], ids[2], ids[4]])
    assert all(r["held"] is None and r["retry"] is None and r["queue"] == Q for r in rows)
    assert count(conn, schema, f"status = 'leased' AND NOT counted AND lease_owner = '{OWNER}'") == 3
    assert count(conn, schema, "status = 'queued'") == 3


@pytest.mark.parametrize("limits", [{}, {"concurrency": 3}])
def test_a_paused_queue_gives_no_rows(conn, client, schema, limits):
    set_queue(conn, schema, Q, **limits)
    client.enqueue_many([("t", i) for i in range(3)], queue=Q)
    client.pause_queue(Q)
    assert plain(conn, schema, Q, 5) == []
    assert count(conn, schema, "status = 'queued'") == 3
    client.resume_queue(Q)
    rows = plain(conn, schema, Q, 5)
    if limits:
        assert is_marker(rows, Q)
    else:
        assert len(lease_ids(rows)) == 3


def test_an_undeclared_queue_gives_no_rows(conn, client, schema):
    client.enqueue_many([("t", i) for i in range(3)])  # in the default queue
    assert plain(conn, schema, "nosuchqueue", 5) == []
    assert count(conn, schema, "status = 'queued'") == 3


@pytest.mark.parametrize("jobs", [0, 3])
def test_a_concurrency_limit_gives_the_marker_and_leases_nothing(conn, client, schema, jobs):
    client.queue_add(Q, concurrency=5)
    client.enqueue_many([("t", i) for i in range(jobs)], queue=Q)
    assert is_marker(plain(conn, schema, Q, 5), Q)
    assert count(conn, schema, "status = 'queued'") == jobs
    taken = conn.execute(sql.SQL("SELECT taken FROM {} WHERE queue = %s").format(
        t(schema, "queue_claims")), [Q]).fetchone()["taken"]
    assert taken == 0
    # The fallback the master then runs leases them, counted.
    assert len(lease_ids(full(conn, schema, Q, 5))) == jobs
    assert count(conn, schema, "status = 'leased' AND counted") == jobs


def test_a_rate_limit_gives_the_marker(conn, client, schema):
    client.queue_add(Q, rate="100/s")
    client.enqueue_many([("t", i) for i in range(3)], queue=Q)
    assert is_marker(plain(conn, schema, Q, 2), Q)
    assert count(conn, schema, "status = 'queued'") == 3
    client.queue_update(Q, rate=None)
    assert len(lease_ids(plain(conn, schema, Q, 2))) == 2


def test_key_concurrency_without_keyed_jobs_is_no_limit(conn, client, schema):
    client.queue_add(Q, key_concurrency=3)
    client.enqueue_many([("t", i) for i in range(3)], queue=Q)
    assert len(lease_ids(plain(conn, schema, Q, 5))) == 3


@pytest.mark.parametrize("position", [0, 2])
def test_a_keyed_job_among_the_candidates_gives_the_marker(conn, client, schema, position):
    client.queue_add(Q)
    for i in range(4):
        insert(conn, schema, Q, priority=i, key="customer:1" if i == position else None)
    assert is_marker(plain(conn, schema, Q, 3), Q)
    assert count(conn, schema, "status = 'queued'") == 4
    assert conn.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(
        t(schema, "key_leases"))).fetchone()["n"] == 0


def test_a_keyed_job_behind_the_candidates_does_not(conn, client, schema):
    client.queue_add(Q)
    ids = [insert(conn, schema, Q, priority=i, key="customer:1" if i == 3 else None)
           for i in range(5)]
    insert(conn, schema, Q, priority=-50, offset=3600, key="customer:2")  # not yet runnable
    with conn.transaction(force_rollback=True):
        expected = lease_ids(full(conn, schema, Q, 3))
    rows = plain(conn, schema, Q, 3)
    assert lease_ids(rows) == expected == sorted(ids[:3])
    assert count(conn, schema, "status = 'queued' AND concurrency_key IS NOT NULL") == 2


def test_locked_rows_are_skipped_as_by_claim_jobs(pg_dsn, conn, client, schema):
    client.queue_add(Q)
    ids = [insert(conn, schema, Q, priority=i) for i in range(4)]
    with psycopg.connect(pg_dsn) as other:  # holds the head of the queue
        other.execute(sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(
            t(schema, "jobs")), [ids[0]])
        with conn.transaction(force_rollback=True):
            expected = lease_ids(full(conn, schema, Q, 2))
        rows = plain(conn, schema, Q, 2)
        assert lease_ids(rows) == expected == ids[1:3]
        other.rollback()
    assert count(conn, schema, "status = 'queued'") == 2
    assert lease_ids(plain(conn, schema, Q, 5)) == sorted([ids[0], ids[3]])


def test_a_locked_keyed_job_is_skipped_too(pg_dsn, conn, client, schema):
    client.queue_add(Q)
    keyed = insert(conn, schema, Q, priority=-1, key="k")
    ids = [insert(conn, schema, Q, priority=i) for i in range(2)]
    with psycopg.connect(pg_dsn) as other:
        other.execute(sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(
            t(schema, "jobs")), [keyed])
        assert lease_ids(plain(conn, schema, Q, 2)) == ids
        other.rollback()
    assert is_marker(plain(conn, schema, Q, 2), Q)  # the keyed job, now a candidate

