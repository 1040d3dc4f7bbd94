"""Producer and admin API against a real PostgreSQL: jobrun.Client and jobrun.AsyncClient."""

from __future__ import annotations

import asyncio
import threading
import time
import traceback
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import jobrun
from jobrun import ops
from jobrun.errors import (Conflict, DatabaseUnavailable, InvalidInput, NotFound, Refused,
                           UnknownQueue)
from jobrun.records import AttemptRecord, Enqueued, JobRecord, JobSpec


# --- helpers -------------------------------------------------------------------------------


def count_jobs(conn: psycopg.Connection, schema: str, where: str = "true", params=()) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.jobs WHERE ").format(sql.Identifier(schema)) + sql.SQL(where)
    return conn.execute(query, params).fetchone()[0]


def update_job(conn: psycopg.Connection, schema: str, job_id: int, assignments: str) -> None:
    """Put a job into a state the producer API cannot reach on its own (no worker here)."""
    query = sql.SQL("UPDATE {}.jobs SET ").format(sql.Identifier(schema)) + sql.SQL(assignments) \
        + sql.SQL(" WHERE id = %s")
    assert conn.execute(query, [job_id]).rowcount == 1


def db_now(conn: psycopg.Connection) -> datetime:
    return conn.execute("SELECT now()").fetchone()[0]


class Listener:
    """LISTEN on the schema's wake-up channel from a connection of its own.

    Absence of a notification is shown without waiting out a timeout: notifications from
    different transactions arrive in commit order, so everything a transaction sent has
    arrived by the time a marker committed after it arrives.
    """

    def __init__(self, dsn: str, schema: str) -> None:
        self.channel = f"{schema}_ready"
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        self.dsn = dsn

    def mark(self, payload: str = "--marker--") -> str:
        with psycopg.connect(self.dsn, autocommit=True) as other:
            other.execute("SELECT pg_notify(%s, %s)", [self.channel, payload])
        return payload

    def until(self, payload: str, timeout: float = 10.0) -> list[str]:
        """Every payload received, up to and including the first equal to ``payload``."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in self.conn.notifies(timeout=max(0.0, deadline - time.monotonic()), stop_after=1):
                assert n.channel == self.channel
                got.append(n.payload)
            if got and got[-1] == payload:
                return got
        raise TimeoutError(f"no notification {payload!r} within {timeout}s; got {got}")

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def listener(pg_dsn, schema):
    lst = Listener(pg_dsn, schema)
    yield lst
    lst.close()


@pytest.fixture
def small_client(pg_dsn, schema):
    with jobrun.Client(pg_dsn, schema=schema, max_payload_bytes=100) as c:
        yield c


# --- enqueue -------------------------------------------------------------------------------


def test_enqueue_returns_the_stored_job(client, admin_conn, schema):
    result = client.enqueue("email.send", {"to": "a@b.c", "n": [1, 2]}, priority=-5,
                            max_attempts=3, idempotency_key="k-1")
    assert isinstance(result, Enqueued)
    job, created = result
    assert created is True
    assert isinstance(job, JobRecord)
    assert (job.task, job.queue, job.status) == ("email.send", "default", "queued")
    assert (job.priority, job.max_attempts, job.attempts) == (-5, 3, 0)
    assert job.idempotency_key == "k-1"
    assert job.payload == {"to": "a@b.c", "n": [1, 2]}
    assert job.run_at.tzinfo is not None
    assert job.run_at == job.created_at  # runnable at once, on the database clock
    assert abs((db_now(admin_conn) - job.created_at).total_seconds()) < 60
    # What enqueue returned is exactly what is stored.
    assert client.get(job.id) == job
    assert count_jobs(admin_conn, schema) == 1


def test_enqueue_defaults(client):
    job, created = client.enqueue("t")
    assert created
    assert job.payload is None
    assert (job.queue, job.priority, job.max_attempts, job.idempotency_key) == ("default", 0, 5, None)
    assert client.get(job.id).payload is None


def test_enqueue_with_json_text(client):
    job, _ = client.enqueue("t", '{"a": [1, "x"]}', payload_is_json=True)
    assert job.payload == {"a": [1, "x"]}
    assert client.get(job.id).payload == {"a": [1, "x"]}
    with pytest.raises(InvalidInput, match="not valid JSON"):
        client.enqueue("t", "{nope", payload_is_json=True)


def test_ids_increase(client):
    ids = [client.enqueue("t", i).job.id for i in range(5)]
    assert ids == sorted(ids) and len(set(ids)) == 5


@pytest.mark.parametrize("delay,seconds", [("1h", 3600), (30, 30), (2.5, 2.5), ("1m30s", 90)])
def test_delay_is_relative_to_the_database_clock(client, delay, seconds):
    job, _ = client.enqueue("t", delay=delay)
    assert (job.run_at - job.created_at).total_seconds() == pytest.approx(seconds)
    assert client.get(job.id).run_at == job.run_at


def test_run_at_is_stored_as_given(client):
    when = datetime(2031, 5, 17, 8, 30, 15, 250000, tzinfo=timezone(timedelta(hours=2)))
    job, _ = client.enqueue("t", run_at=when)
    assert job.run_at == when
    assert client.get(job.id).run_at == when


def test_run_at_and_delay_errors(client, admin_conn, schema):
    aware = datetime.now(timezone.utc) + timedelta(hours=1)
    with pytest.raises(InvalidInput, match="not both"):
        client.enqueue("t", run_at=aware, delay="5m")
    with pytest.raises(InvalidInput, match="timezone-aware"):
        client.enqueue("t", run_at=datetime(2030, 1, 1, 12, 0))
    with pytest.raises(InvalidInput, match="must be a datetime"):
        client.enqueue("t", run_at="2030-01-01T00:00:00Z")
    with pytest.raises(InvalidInput, match="invalid duration"):
        client.enqueue("t", delay="soon")
    with pytest.raises(InvalidInput):
        client.enqueue("t", delay=-1)
    assert count_jobs(admin_conn, schema) == 0


# --- idempotency -----------------------------------------------------------------------------


def test_idempotent_replay_returns_the_stored_job(client, admin_conn, schema):
    first = client.enqueue("email.send", {"to": "x"}, idempotency_key="order-42", priority=3)
    again = client.enqueue("email.send", {"to": "x"}, idempotency_key="order-42", priority=9)
    assert first.created is True and again.created is False
    assert again.job.id == first.job.id
    assert again.job.priority == 3  # the stored job, not the replay's arguments
    assert again.job.created_at == first.job.created_at
    assert count_jobs(admin_conn, schema) == 1


def test_same_key_in_another_queue_is_another_job(client, admin_conn, schema):
    client.declare_queue("emails")
    a = client.enqueue("email.send", {"to": "x"}, idempotency_key="k")
    b = client.enqueue("email.send", {"to": "x"}, idempotency_key="k", queue="emails")
    assert a.created and b.created
    assert a.job.id != b.job.id
    assert b.job.queue == "emails"
    assert count_jobs(admin_conn, schema) == 2


@pytest.mark.parametrize("task,payload", [("email.send", {"to": "y"}), ("email.other", {"to": "x"}),
                                          ("email.send", None)])
def test_same_key_with_another_body_is_a_conflict(client, admin_conn, schema, task, payload):
    stored = client.enqueue("email.send", {"to": "x"}, idempotency_key="k").job
    before = client.get(stored.id)
    with pytest.raises(Conflict, match='idempotency key "k"'):
        client.enqueue(task, payload, idempotency_key="k")
    assert count_jobs(admin_conn, schema) == 1
    assert client.get(stored.id) == before


def _race(n: int, work):
    """Run work(i) in n threads released together by a barrier; return results by index."""
    barrier = threading.Barrier(n)
    results: list = [None] * n
    errors: list = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except BaseException as exc:  # reported below, with the thread's traceback
            errors.append((i, exc, traceback.format_exc()))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a racing producer hung"
    return results, errors


def test_concurrent_producers_racing_on_one_key(pg_dsn, schema, admin_conn):
    n = 8
    clients = [jobrun.Client(pg_dsn, schema=schema) for _ in range(n)]
    try:
        for c in clients:
            c.queues()  # connect before the race, so the barrier releases statements, not logins
        for round_no in range(5):
            key = f"race-{round_no}"
            results, errors = _race(n, lambda i: clients[i].enqueue(
                "race.task", {"round": round_no}, idempotency_key=key))
            assert not errors, errors[0][2]
            assert [r.created for r in results].count(True) == 1
            assert len({r.job.id for r in results}) == 1
            assert all(r.job.payload == {"round": round_no} for r in results)
            assert count_jobs(admin_conn, schema, "idempotency_key = %s", [key]) == 1
    finally:
        for c in clients:
            c.close()


def test_concurrent_producers_with_different_bodies_one_wins(pg_dsn, schema, admin_conn):
    n = 6
    clients = [jobrun.Client(pg_dsn, schema=schema) for _ in range(n)]
    try:
        for c in clients:
            c.queues()
        results, errors = _race(n, lambda i: clients[i].enqueue("race.task", {"who": i},
                                                               idempotency_key="contested"))
        winners = [r for r in results if r is not None]
        assert len(winners) == 1 and winners[0].created
        assert len(errors) == n - 1
        assert all(isinstance(exc, Conflict) for _, exc, _ in errors), errors
        stored = clients[0].get(winners[0].job.id)
        assert stored.payload == winners[0].job.payload
        assert count_jobs(admin_conn, schema) == 1
    finally:
        for c in clients:
            c.close()


# --- transactions and notifications --------------------------------------------------------


def test_transactional_enqueue_rolled_back_leaves_no_job_and_no_notification(
        pg_dsn, schema, client, admin_conn, listener):
    client.declare_queue("rolled")
    with psycopg.connect(pg_dsn) as conn:
        job, created = client.enqueue("t", {"x": 1}, queue="rolled", conn=conn)
        assert created
        # Visible inside the transaction...
        assert client.get(job.id, conn=conn).queue == "rolled"
        conn.rollback()
    # ...and gone after the rollback, with nothing sent.
    assert count_jobs(admin_conn, schema) == 0
    with pytest.raises(NotFound):
        client.get(job.id)
    # A committed enqueue afterwards is heard (so this listener does hear enqueues).
    client.enqueue("t", {"x": 2}, queue="default")
    assert listener.until("default") == ["default"]


def test_transactional_enqueue_committed_with_the_callers_work(pg_dsn, schema, client, admin_conn):
    admin_conn.execute(sql.SQL("CREATE TABLE {}.orders (id int)").format(sql.Identifier(schema)))
    with psycopg.connect(pg_dsn) as conn:
        conn.execute(sql.SQL("INSERT INTO {}.orders VALUES (1)").format(sql.Identifier(schema)))
        job, _ = client.enqueue("order.ship", {"order": 1}, conn=conn)
        # Not visible to others before the commit.
        assert count_jobs(admin_conn, schema) == 0
        conn.commit()
    assert client.get(job.id).payload == {"order": 1}


def test_one_transaction_wakes_each_queue_once(pg_dsn, client, listener):
    client.declare_queue("qa")
    client.declare_queue("qb")
    with psycopg.connect(pg_dsn) as conn:
        for i in range(50):
            client.enqueue("t", i, queue="qa", conn=conn)
            client.enqueue("t", i, queue="qb", conn=conn)
        client.enqueue_many([JobSpec("t", i, queue="qa" if i % 2 else "qb") for i in range(20)],
                            conn=conn)
        conn.commit()
    got = listener.until(listener.mark())
    assert sorted(got[:-1]) == ["qa", "qb"]


def test_bulk_enqueue_wakes_each_queue_once(client, listener):
    client.declare_queue("qa")
    client.declare_queue("qb")
    client.enqueue_many([JobSpec("t", i, queue=("qa", "qb", "default")[i % 3]) for i in range(300)])
    got = listener.until(listener.mark())
    assert sorted(got[:-1]) == ["default", "qa", "qb"]


def test_future_jobs_do_not_wake_anyone(client, listener):
    client.declare_queue("later")
    client.enqueue("t", queue="later", delay="1h")
    client.enqueue("t", queue="later", run_at=datetime.now(timezone.utc) + timedelta(days=1))
    client.enqueue_many([("t", 1), ("t", 2)], queue="later", delay=600)
    client.enqueue("t", queue="default")
    assert listener.until("default") == ["default"]


def test_replay_does_not_wake_anyone(client, listener):
    client.declare_queue("q1")
    client.enqueue("t", 1, queue="q1", idempotency_key="k")
    assert listener.until("q1") == ["q1"]
    assert client.enqueue("t", 1, queue="q1", idempotency_key="k").created is False
    assert listener.until(listener.mark()) == ["--marker--"]


# --- bulk ----------------------------------------------------------------------------------


def test_bulk_enqueue_100k(client, admin_conn, schema):
    client.declare_queue("bulk")
    pre = client.enqueue("bulk.task", {"i": -1}, queue="bulk", idempotency_key="pre-existing").job
    n = 100_000
    items: list = []
    for i in range(n):
        if i % 1000 == 0:
            items.append(JobSpec("bulk.task", {"i": i}, queue="bulk", priority=-7,
                                 idempotency_key=f"key-{i}", max_attempts=9))
        else:
            items.append(("bulk.task", {"i": i}))
    # Replays inside the bulk: one of a stored job, one of a job earlier in the same batch.
    items.append(JobSpec("bulk.task", {"i": -1}, queue="bulk", idempotency_key="pre-existing"))
    items.append(JobSpec("bulk.task", {"i": 5000}, queue="bulk", priority=-7, max_attempts=9,
                         idempotency_key="key-5000"))

    t0 = time.monotonic()
    result = client.enqueue_many(items, priority=2)
    elapsed = time.monotonic() - t0

    assert len(result) == n + 2
    ids = [job_id for job_id, _ in result]
    created = [c for _, c in result]
    assert created[:n] == [True] * n
    assert created[n:] == [False, False]
    assert len(set(ids[:n])) == n
    assert ids[n] == pre.id
    assert ids[n + 1] == ids[5000]
    assert count_jobs(admin_conn, schema) == n + 1

    # Ids come back in input order: each id's row holds the payload of its input item.
    with admin_conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT id, (payload->>'i')::int, queue, priority, max_attempts,"
                            " idempotency_key FROM {}.jobs").format(sql.Identifier(schema)))
        rows = {r[0]: r[1:] for r in cur}
    for i in range(n):
        payload_i, queue, prio, max_att, key = rows[ids[i]]
        assert payload_i == i
        if i % 1000 == 0:
            assert (queue, prio, max_att, key) == ("bulk", -7, 9, f"key-{i}")
        else:
            assert (queue, prio, max_att, key) == ("default", 2, 5, None)
    assert elapsed < 120, f"100k bulk enqueue took {elapsed:.1f}s"


def test_bulk_per_item_timing(client):
    when = datetime(2032, 1, 1, tzinfo=timezone.utc)
    result = client.enqueue_many([JobSpec("t", 1), JobSpec("t", 2, delay="1h"),
                                  JobSpec("t", 3, run_at=when)], delay=60)
    jobs = [client.get(job_id) for job_id, _ in result]
    # Bulk delays are made absolute with the database clock read once, one statement before
    # the insert, so they count from a moment slightly before created_at.
    assert 59 < (jobs[0].run_at - jobs[0].created_at).total_seconds() <= 60
    assert 3599 < (jobs[1].run_at - jobs[1].created_at).total_seconds() <= 3600
    assert jobs[2].run_at == when


def test_bulk_of_nothing(client):
    assert client.enqueue_many([]) == []


def stored_jobs(conn: psycopg.Connection, schema: str, ids: list[int]) -> list[tuple]:
    """(task, payload, queue, priority, seconds from created_at to run_at, max_attempts) of
    each id, in the order given."""
    query = sql.SQL("SELECT id, task, payload, queue, priority,"
                    " round(extract(epoch FROM run_at - created_at)), max_attempts"
                    " FROM {}.jobs WHERE id = ANY(%s)").format(sql.Identifier(schema))
    rows = {r[0]: r[1:] for r in conn.execute(query, [ids])}
    return [rows[i] for i in ids]


def mixed_bulk(key_prefix: str | None) -> list:
    """Items that between them set every per-item option (and keys, given a prefix)."""
    when = datetime(2032, 1, 1, tzinfo=timezone.utc)
    items: list = [("t.plain", {"i": 0}),
                   JobSpec("t.spec", [1]),
                   JobSpec("t.queue", 2, queue="other"),
                   JobSpec("t.prio", 3, priority=-9),
                   JobSpec("t.delay", 4, delay="2h"),
                   JobSpec("t.at", 5, run_at=when),
                   JobSpec("t.tries", 6, max_attempts=2),
                   ("t.plain", None)]
    if key_prefix is not None:
        items = [(JobSpec(*item) if isinstance(item, tuple) else item) for item in items]
        items = [JobSpec(s.task, s.payload, s.queue, s.priority, s.run_at, s.delay,
                         s.max_attempts, f"{key_prefix}{n}") for n, s in enumerate(items)]
    return items


def test_bulk_without_keys_stores_each_items_options_in_input_order(client, admin_conn, schema):
    """Without idempotency keys every job is new and takes the plain insert; with keys, the
    SQL function: both store the same jobs and return their ids in input order."""
    client.declare_queue("bulkq")
    client.declare_queue("other")
    stored = {}
    for prefix in (None, "k"):
        result = client.enqueue_many(mixed_bulk(prefix), queue="bulkq", priority=3, delay=60,
                                     max_attempts=4)
        assert [c for _, c in result] == [True] * 8
        ids = [i for i, _ in result]
        assert ids == sorted(ids)
        stored[prefix] = stored_jobs(admin_conn, schema, ids)
    assert stored[None] == stored["k"]
    when = datetime(2032, 1, 1, tzinfo=timezone.utc)
    at = round((when - db_now(admin_conn)).total_seconds())
    rows = [r[:5] for r in stored[None]]
    assert [r[0] for r in rows] == ["t.plain", "t.spec", "t.queue", "t.prio", "t.delay", "t.at",
                                    "t.tries", "t.plain"]
    assert [r[1] for r in rows] == [{"i": 0}, [1], 2, 3, 4, 5, 6, None]
    assert [r[2] for r in rows] == ["bulkq", "bulkq", "other"] + ["bulkq"] * 5
    assert [r[3] for r in rows] == [3, 3, 3, -9, 3, 3, 3, 3]
    assert [r[4] for r in rows][:5] == [60, 60, 60, 60, 7200]
    assert abs(rows[5][4] - at) < 60 and rows[6][4] == rows[7][4] == 60
    assert [r[5] for r in stored[None]] == [4, 4, 4, 4, 4, 4, 2, 4]


def test_bulk_without_keys_joins_the_callers_transaction(pg_dsn, client, admin_conn, schema,
                                                          listener):
    with psycopg.connect(pg_dsn) as conn:
        result = client.enqueue_many([("t", i) for i in range(5)], conn=conn)
        assert [client.get(i, conn=conn).payload for i, _ in result] == [0, 1, 2, 3, 4]
        assert count_jobs(admin_conn, schema) == 0
        conn.rollback()
        with pytest.raises(UnknownQueue, match='queue "nowhere" is not declared'):
            client.enqueue_many([("t", 1), JobSpec("t", 2, queue="nowhere")], conn=conn)
        conn.commit()
        assert count_jobs(admin_conn, schema) == 0
        client.enqueue_many([("t", 6)], conn=conn)
        conn.commit()
    assert count_jobs(admin_conn, schema) == 1
    # One wake-up, from the committed transaction only.
    assert listener.until(listener.mark()) == ["default", "--marker--"]


def test_single_enqueue_without_key_joins_the_callers_transaction(pg_dsn, client, admin_conn,
                                                                  schema, listener):
    with psycopg.connect(pg_dsn) as conn:
        job = client.enqueue("t", {"x": 1}, delay=60, conn=conn).job
        assert client.get(job.id, conn=conn).payload == {"x": 1}
        assert count_jobs(admin_conn, schema) == 0
        conn.rollback()
        with pytest.raises(UnknownQueue, match='queue "nowhere" is not declared'):
            client.enqueue("t", 2, queue="nowhere", conn=conn)
        kept = client.enqueue("t", 3, conn=conn).job  # the transaction is still usable
        conn.commit()
    assert count_jobs(admin_conn, schema) == 1
    assert client.get(kept.id).payload == 3
    assert listener.until(listener.mark()) == ["default", "--marker--"]


# --- bad input changes nothing ---------------------------------------------------------------


class Unserialisable:
    pass


BAD_ENQUEUES = [
    (dict(task="t", payload=Unserialisable()), InvalidInput, "not JSON-serialisable"),
    (dict(task="t", payload={"a": float("nan")}), InvalidInput, "not JSON-serialisable"),
    (dict(task="t", payload={"a": "x\x00y"}), InvalidInput, "NUL"),
    (dict(task="t", payload={"k\x00": 1}), InvalidInput, "NUL"),
    (dict(task="t", payload={"a": "\ud800"}), InvalidInput, "surrogate"),
    (dict(task="t", payload="x" * 200), InvalidInput, "over the limit of 100 bytes"),
    (dict(task="t", payload="é" * 60), InvalidInput, "over the limit of 100 bytes"),
    (dict(task="bad task"), InvalidInput, "invalid task name"),
    (dict(task="9lives"), InvalidInput, "invalid task name"),
    (dict(task=""), InvalidInput, "invalid task name"),
    (dict(task="t", queue="no such/queue"), InvalidInput, "invalid queue name"),
    (dict(task="t", queue="undeclared"), UnknownQueue, 'queue "undeclared" is not declared'),
    (dict(task="t", priority=101), InvalidInput, "priority"),
    (dict(task="t", priority=-101), InvalidInput, "priority"),
    (dict(task="t", priority=True), InvalidInput, "priority"),
    (dict(task="t", max_attempts=0), InvalidInput, "max_attempts"),
    (dict(task="t", max_attempts=1001), InvalidInput, "max_attempts"),
    (dict(task="t", idempotency_key=""), InvalidInput, "idempotency key"),
    (dict(task="t", idempotency_key="k" * 256), InvalidInput, "idempotency key"),
    (dict(task="t", idempotency_key="k\udc80"), InvalidInput, "idempotency key"),
]


@pytest.mark.parametrize("kwargs,error,message", BAD_ENQUEUES,
                         ids=[f"{i}-{e.__name__}" for i, (_, e, _) in enumerate(BAD_ENQUEUES)])
def test_bad_enqueue_raises_and_changes_nothing(small_client, admin_conn, schema, kwargs, error, message):
    small_client.enqueue("t", "keep", idempotency_key="existing")
    before = count_jobs(admin_conn, schema)
    with pytest.raises(error, match=message):
        small_client.enqueue(**kwargs)
    assert count_jobs(admin_conn, schema) == before == 1


@pytest.mark.parametrize("kwargs,error,message", BAD_ENQUEUES,
                         ids=[f"{i}-{e.__name__}" for i, (_, e, _) in enumerate(BAD_ENQUEUES)])
def test_bad_item_in_a_bulk_raises_and_changes_nothing(small_client, admin_conn, schema, kwargs,
                                                       error, message):
    good = [JobSpec("t", i) for i in range(10)]
    spec = JobSpec(kwargs.pop("task"), kwargs.pop("payload", None), **kwargs)
    with pytest.raises(error, match=message):
        small_client.enqueue_many(good[:5] + [spec] + good[5:])
    assert count_jobs(admin_conn, schema) == 0


def test_conflict_in_a_bulk_changes_nothing(client, admin_conn, schema):
    client.enqueue("t", 1, idempotency_key="k")
    with pytest.raises(Conflict):
        client.enqueue_many([JobSpec("t", 0), JobSpec("t", 2, idempotency_key="k"), JobSpec("t", 3)])
    assert count_jobs(admin_conn, schema) == 1


def test_conflict_within_one_bulk_changes_nothing(client, admin_conn, schema):
    with pytest.raises(Conflict):
        client.enqueue_many([JobSpec("t", 1, idempotency_key="k"), JobSpec("t", 2, idempotency_key="k")])
    assert count_jobs(admin_conn, schema) == 0


def test_bad_bulk_defaults_are_rejected(client, admin_conn, schema):
    with pytest.raises(InvalidInput, match="priority"):
        client.enqueue_many([("t", 1)], priority=500)
    with pytest.raises(InvalidInput, match="queue name"):
        client.enqueue_many([("t", 1)], queue="a b")
    with pytest.raises(InvalidInput, match="not both"):
        client.enqueue_many([("t", 1)], delay=5, run_at=datetime.now(timezone.utc))
    with pytest.raises(InvalidInput, match="job 1: invalid task name"):
        client.enqueue_many([("t", 1), ("bad name", 2)])
    assert count_jobs(admin_conn, schema) == 0


def test_payload_at_the_cap_is_accepted(small_client, admin_conn, schema):
    """The cap means the same in Python and in SQL: a payload Python accepts is stored."""
    at_cap = {"to": "a@b.c", "tags": [1, 2, 3], "body": ""}
    text = '{"to": "a@b.c", "tags": [1, 2, 3], "body": ""}'
    at_cap["body"] = "é" * ((100 - len(text.encode())) // 2)
    size = len(text.encode()) + 2 * len(at_cap["body"])
    assert 99 <= size <= 100
    job, created = small_client.enqueue("t", at_cap)
    assert created and small_client.get(job.id).payload == at_cap
    ids = small_client.enqueue_many([("t", at_cap)] * 3)
    assert all(c for _, c in ids)
    with pytest.raises(InvalidInput, match="over the limit"):
        small_client.enqueue("t", {**at_cap, "body": at_cap["body"] + "éé"})
    assert count_jobs(admin_conn, schema) == 4


def test_large_numeric_payload_under_the_default_cap_is_accepted(client):
    """About 600 kB of JSON text: under the 1 MiB cap, whatever jsonb's binary size is."""
    payload = list(range(100_000))
    job, created = client.enqueue("t", payload)
    assert created
    assert client.get(job.id).payload == payload


def test_unreachable_database(monkeypatch):
    monkeypatch.delenv("JOBRUN_DATABASE_URL", raising=False)
    c = jobrun.Client("postgresql://u:s3cretpw@127.0.0.1:1/db")
    with pytest.raises(DatabaseUnavailable) as info:
        c.enqueue("t", {"a": 1})
    message = str(info.value)
    assert "127.0.0.1" in message
    assert "127.0.0.1:1/" in message or "port 1 " in message
    text = "".join(traceback.format_exception(info.value))
    assert "s3cretpw" not in text
    assert "s3cretpw" not in repr(info.value)


def test_unreachable_database_async(monkeypatch):
    monkeypatch.delenv("JOBRUN_DATABASE_URL", raising=False)

    async def main():
        c = jobrun.AsyncClient("postgresql://u:s3cretpw@127.0.0.1:1/db")
        await c.enqueue("t")

    with pytest.raises(DatabaseUnavailable) as info:
        asyncio.run(main())
    assert "127.0.0.1" in str(info.value)
    assert "s3cretpw" not in "".join(traceback.format_exception(info.value))


def test_unmigrated_schema_says_to_migrate(pg_dsn):
    with jobrun.Client(pg_dsn, schema="never_migrated") as c:
        with pytest.raises(jobrun.JobrunError, match="jobrun migrate"):
            c.enqueue("t")


# --- get / attempts / list -------------------------------------------------------------------


def test_get_missing_job(client):
    with pytest.raises(NotFound, match="no job 123456"):
        client.get(123456)


def test_attempts_are_listed_in_order(client, admin_conn, schema):
    job = client.enqueue("t").job
    assert client.attempts(job.id) == []
    table = sql.SQL("INSERT INTO {}.job_attempts (job_id, lease_token, attempt, worker_host, worker_pid,"
                    " outcome, error) VALUES (%s, %s, %s, 'h', 42, %s, %s)").format(sql.Identifier(schema))
    admin_conn.execute(table, [job.id, 2, 2, "succeeded", None])
    admin_conn.execute(table, [job.id, 1, 1, "failed", "boom"])
    got = client.attempts(job.id)
    assert all(isinstance(a, AttemptRecord) for a in got)
    assert [(a.lease_token, a.attempt, a.outcome, a.error) for a in got] == \
        [(1, 1, "failed", "boom"), (2, 2, "succeeded", None)]
    assert got[0].worker_pid == 42


def test_list_filters_and_pages_newest_first(client, admin_conn, schema):
    client.declare_queue("emails")
    made = []
    for i in range(12):
        queue = "emails" if i % 3 == 0 else "default"
        task = "a.task" if i % 2 == 0 else "b.task"
        made.append(client.enqueue(task, i, queue=queue).job)
    update_job(admin_conn, schema, made[4].id, "status = 'dead', finished_at = now()")

    everything = client.list(limit=100)
    assert [j.id for j in everything] == sorted((j.id for j in made), reverse=True)
    assert [j.id for j in client.list(queue="emails")] == [j.id for j in reversed(made) if j.queue == "emails"]
    assert [j.id for j in client.list(task="b.task")] == [j.id for j in reversed(made) if j.task == "b.task"]
    assert [j.id for j in client.list(status="dead")] == [made[4].id]
    assert made[4].id not in [j.id for j in client.list(status="queued")]
    assert [j.id for j in client.list(queue="emails", task="a.task")] == \
        [j.id for j in reversed(made) if j.queue == "emails" and j.task == "a.task"]

    pages, before = [], None
    while True:
        page = client.list(limit=5, before=before)
        if not page:
            break
        assert len(page) <= 5
        pages.append([j.id for j in page])
        before = page[-1].id
    assert [len(p) for p in pages] == [5, 5, 2]
    assert [i for p in pages for i in p] == [j.id for j in everything]
    assert client.list(limit=3, before=made[2].id) == [client.get(made[1].id), client.get(made[0].id)]


@pytest.mark.parametrize("kwargs", [dict(status="running"), dict(limit=0), dict(limit=10001),
                                    dict(queue="a b"), dict(task="1x")])
def test_list_rejects_bad_filters(client, kwargs):
    with pytest.raises(InvalidInput):
        client.list(**kwargs)


# --- cancel / retry --------------------------------------------------------------------------


def test_cancel_queued_job_is_immediate(client):
    job = client.enqueue("t").job
    cancelled = client.cancel(job.id)
    assert cancelled.status == "cancelled"
    assert cancelled.finished_at is not None
    assert cancelled.cancel_requested is False
    assert client.get(job.id) == cancelled


def test_cancel_leased_job_requests_it(client, admin_conn, schema):
    job = client.enqueue("t").job
    update_job(admin_conn, schema, job.id, "status = 'leased', attempts = 1, lease_owner = 'm1',"
               " lease_token = lease_token + 1, lease_expires_at = now() + interval '30 seconds',"
               " started_at = now()")
    result = client.cancel(job.id)
    assert result.status == "leased"
    assert result.cancel_requested is True
    assert result.finished_at is None
    stored = client.get(job.id)
    assert (stored.status, stored.cancel_requested, stored.lease_owner) == ("leased", True, "m1")


@pytest.mark.parametrize("status", ["succeeded", "dead", "cancelled"])
def test_cancel_finished_job_is_refused(client, admin_conn, schema, status):
    job = client.enqueue("t").job
    update_job(admin_conn, schema, job.id, f"status = '{status}', finished_at = now()")
    before = client.get(job.id)
    with pytest.raises(Refused, match=f"is {status}"):
        client.cancel(job.id)
    assert client.get(job.id) == before


def test_cancel_missing_job(client):
    with pytest.raises(NotFound):
        client.cancel(987654)


@pytest.mark.parametrize("status", ["dead", "cancelled"])
def test_retry_requeues_dead_and_cancelled_jobs(client, admin_conn, schema, listener, status):
    job = client.enqueue("t", {"x": 1}, delay="1h").job
    update_job(admin_conn, schema, job.id,
               f"status = '{status}', attempts = 5, crashes = 2, finished_at = now(),"
               " cancel_requested = true")
    listener.until(listener.mark())  # nothing pending before the retry
    retried = client.retry(job.id)
    assert (retried.status, retried.attempts, retried.crashes) == ("queued", 0, 0)
    assert retried.finished_at is None and retried.cancel_requested is False
    assert retried.run_at <= db_now(admin_conn)  # runnable now, not at the old future time
    assert client.get(job.id) == retried
    assert listener.until("default") == ["default"]  # and the queue is woken


@pytest.mark.parametrize("status", ["queued", "leased", "succeeded"])
def test_retry_of_a_live_or_succeeded_job_is_refused(client, admin_conn, schema, status):
    job = client.enqueue("t").job
    if status != "queued":
        update_job(admin_conn, schema, job.id, f"status = '{status}'")
    before = client.get(job.id)
    with pytest.raises(Refused, match=f"is {status}"):
        client.retry(job.id)
    assert client.get(job.id) == before


def test_retry_missing_job(client):
    with pytest.raises(NotFound):
        client.retry(987654)


# --- purge ---------------------------------------------------------------------------------


def _make_jobs(client, admin_conn, schema, status: str, age: str, n: int = 1) -> list[int]:
    ids = []
    for _ in range(n):
        job = client.enqueue("t").job
        if status != "queued":
            update_job(admin_conn, schema, job.id,
                       f"status = '{status}', finished_at = now() - interval '{age}'")
        ids.append(job.id)
    return ids


def test_purge_deletes_only_old_finished_jobs(client, admin_conn, schema):
    old = (_make_jobs(client, admin_conn, schema, "succeeded", "2 hours")
           + _make_jobs(client, admin_conn, schema, "dead", "3 hours")
           + _make_jobs(client, admin_conn, schema, "cancelled", "1 day"))
    young = _make_jobs(client, admin_conn, schema, "succeeded", "10 minutes")
    live = _make_jobs(client, admin_conn, schema, "queued", "") + \
        _make_jobs(client, admin_conn, schema, "leased", "5 hours")
    admin_conn.execute(sql.SQL("INSERT INTO {}.job_attempts (job_id, lease_token, attempt, outcome)"
                               " VALUES (%s, 1, 1, 'succeeded')").format(sql.Identifier(schema)),
                       [old[0]])
    admin_conn.execute(sql.SQL("INSERT INTO {}.processed_effects (task, effect_key, job_id)"
                               " VALUES ('t', 'e1', %s)").format(sql.Identifier(schema)), [old[0]])

    assert client.purge("1h") == 3
    remaining = {j.id for j in client.list(limit=100)}
    assert remaining == set(young + live)
    attempts_left = admin_conn.execute(sql.SQL("SELECT count(*) FROM {}.job_attempts")
                                       .format(sql.Identifier(schema))).fetchone()[0]
    effects_left = admin_conn.execute(sql.SQL("SELECT count(*) FROM {}.processed_effects")
                                      .format(sql.Identifier(schema))).fetchone()[0]
    assert (attempts_left, effects_left) == (0, 0)
    assert client.purge("1h") == 0


def test_purge_by_status(client, admin_conn, schema):
    dead = _make_jobs(client, admin_conn, schema, "dead", "2 days", 2)
    ok = _make_jobs(client, admin_conn, schema, "succeeded", "2 days", 2)
    assert client.purge("1d", statuses=["succeeded"]) == 2
    assert {j.id for j in client.list()} == set(dead)
    assert ok


@pytest.mark.parametrize("kwargs", [dict(older_than="soon"), dict(older_than="1h", statuses=["queued"]),
                                    dict(older_than="1h", statuses=["leased"])])
def test_purge_rejects_bad_arguments(client, admin_conn, schema, kwargs):
    _make_jobs(client, admin_conn, schema, "succeeded", "2 days")
    with pytest.raises(InvalidInput):
        client.purge(**kwargs)
    assert count_jobs(admin_conn, schema) == 1


def test_purge_works_in_batches(pg_dsn, client, admin_conn, schema):
    _make_jobs(client, admin_conn, schema, "succeeded", "2 hours", 20)
    keep = _make_jobs(client, admin_conn, schema, "succeeded", "1 minute", 2)
    deleted_per_batch: list[int] = []
    op = ops.purge(client.queries, "1h", batch=7)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            step = next(op)
            while True:
                with conn.cursor(row_factory=dict_row) as cur:
                    cur.execute(step.query, step.params)
                    if step.returns_rows:  # the queues' own retentions (none here)
                        step = op.send(cur.fetchall())
                        continue
                    deleted_per_batch.append(cur.rowcount)
                step = op.send(deleted_per_batch[-1])
        except StopIteration as stop:
            total = stop.value
    assert deleted_per_batch == [7, 7, 6]
    assert total == 20
    assert {j.id for j in client.list()} == set(keep)


# --- stats and queues ------------------------------------------------------------------------


def test_stats_counts_by_queue_and_status(client, admin_conn, schema):
    client.declare_queue("emails")
    client.declare_queue("idle")
    q = [client.enqueue("t", i, queue="emails").job for i in range(3)]
    update_job(admin_conn, schema, q[0].id, "run_at = now() - interval '10 minutes'")
    for _ in range(2):
        client.enqueue("t", queue="emails", delay="1h")
    for status in ("leased", "succeeded", "dead", "cancelled", "dead"):
        job = client.enqueue("t", queue="emails").job
        update_job(admin_conn, schema, job.id, f"status = '{status}'")
    client.enqueue("t", queue="default")
    client.pause_queue("idle")

    stats = {s.queue: s for s in client.stats()}
    assert set(stats) == {"default", "emails", "idle"}
    e = stats["emails"]
    assert (e.queued, e.scheduled, e.leased, e.succeeded, e.dead, e.cancelled) == (3, 2, 1, 1, 2, 1)
    assert 600 <= e.oldest_queued_age < 900
    assert e.paused is False
    assert (stats["default"].queued, stats["default"].dead) == (1, 0)
    idle = stats["idle"]
    assert idle.paused is True
    assert (idle.queued, idle.scheduled, idle.leased, idle.succeeded) == (0, 0, 0, 0)
    assert idle.oldest_queued_age is None


def test_queue_admin(client, listener):
    assert [q["name"] for q in client.queues()] == ["default"]
    client.declare_queue("reports")
    client.declare_queue("reports")  # a no-op the second time
    assert [q["name"] for q in client.queues()] == ["default", "reports"]
    assert client.pause_queue("reports")["paused"] is True
    assert client.resume_queue("reports")["paused"] is False
    assert listener.until("reports") == ["reports"]  # resuming wakes the queue
    with pytest.raises(NotFound):
        client.pause_queue("nope")
    with pytest.raises(InvalidInput):
        client.declare_queue("bad name")


# --- AsyncClient ---------------------------------------------------------------------------


def test_async_client_parity(pg_dsn, schema, client, admin_conn):
    async def main():
        async with jobrun.AsyncClient(pg_dsn, schema=schema) as ac:
            job, created = await ac.enqueue("email.send", {"to": "a"}, priority=4, delay="5m",
                                            idempotency_key="ak")
            assert created
            replay = await ac.enqueue("email.send", {"to": "a"}, idempotency_key="ak")
            assert replay.created is False and replay.job.id == job.id
            with pytest.raises(Conflict):
                await ac.enqueue("email.send", {"to": "b"}, idempotency_key="ak")
            with pytest.raises(UnknownQueue):
                await ac.enqueue("t", queue="nowhere")
            with pytest.raises(InvalidInput):
                await ac.enqueue("bad name")
            many = await ac.enqueue_many([("t", i) for i in range(10)], queue="default")
            got = await ac.get(job.id)
            listed = await ac.list(task="t", limit=4)
            page2 = await ac.list(task="t", limit=100, before=listed[-1].id)
            with pytest.raises(NotFound):
                await ac.get(10**9)
            async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
                rolled, _ = await ac.enqueue("t", "rolled back", conn=conn)
                await conn.rollback()
            return job, many, got, listed, page2, rolled

    job, many, got, listed, page2, rolled = asyncio.run(main())
    assert got == job == client.get(job.id)
    assert (job.priority, job.queue, job.payload) == (4, "default", {"to": "a"})
    assert (job.run_at - job.created_at).total_seconds() == pytest.approx(300)
    assert [c for _, c in many] == [True] * 10
    many_ids = [i for i, _ in many]
    assert [j.id for j in listed] == many_ids[::-1][:4]
    assert [j.id for j in page2] == many_ids[::-1][4:]
    assert listed == client.list(task="t", limit=4)
    assert count_jobs(admin_conn, schema) == 11
    with pytest.raises(NotFound):
        client.get(rolled.id)
