"""Limits in the claim statement against a real PostgreSQL: cluster-wide concurrency, rate
windows, concurrency keys, this master's own room, the queue order, and the releases that give
room back (completion, give-back, reaper), each from one connection per master."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.errors import InvalidInput
from jobrun.sql import for_schema
from jobrun.policy import RetryPolicy
from jobrun.worker.claimer import claim_params
from jobrun.worker.reaper import reap_params

pytestmark = pytest.mark.db


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def set_queue(conn, schema, name, **settings):
    """Queue settings by plain SQL (bumping version), as an operator's update would."""
    sets = sql.SQL(", ").join(sql.SQL("{} = {}").format(sql.Identifier(k), sql.Literal(v))
                              for k, v in settings.items())
    conn.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s) ON CONFLICT DO NOTHING").format(
        sql.Identifier(schema, "queues")), [name])
    if settings:
        conn.execute(sql.SQL("UPDATE {} SET {}, version = version + 1 WHERE name = %s").format(
            sql.Identifier(schema, "queues"), sets), [name])


def claim(conn, schema, queues, limit, owner="m1", **kw):
    rows = conn.execute(for_schema(schema).claim_jobs,
                        claim_params(queues, limit, owner, 60, **kw)).fetchall()
    return [r for r in rows if r["id"] is not None], [r for r in rows if r["id"] is None]


def complete(conn, schema, rows, owner="m1"):
    n = len(rows)
    q = for_schema(schema)
    return conn.execute(q.complete_jobs, {
        "ids": [r["id"] for r in rows], "tokens": [r["lease_token"] for r in rows],
        "statuses": ["succeeded"] * n, "outcomes": ["succeeded"] * n, "delays": [0.0] * n,
        "errors": [None] * n, "tracebacks": [None] * n, "results": ["null"] * n,
        "children": [0] * n, "crashed": [0] * n, "logs": [None] * n, "refunds": [0] * n,
        "owner": owner, "host": "h", "pid": 1}).fetchall()


def leased(conn, schema, queue):
    return conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE status = 'leased' AND queue = %s")
                        .format(sql.Identifier(schema, "jobs")), [queue]).fetchone()["n"]


def test_a_queue_without_limits_claims_as_before(conn, client, schema):
    client.enqueue_many([("t", i) for i in range(10)])
    jobs, held = claim(conn, schema, ["default"], 8)
    assert len(jobs) == 8 and held == []


def test_cluster_wide_concurrency_holds_across_owners_and_comes_back_on_release(conn, client, schema):
    set_queue(conn, schema, "default", concurrency=3)
    client.enqueue_many([("t", i) for i in range(10)])
    a, held_a = claim(conn, schema, ["default"], 2, owner="a")
    b, held_b = claim(conn, schema, ["default"], 5, owner="b")
    assert (len(a), len(b)) == (2, 1)
    assert held_a == [] and [(h["queue"], h["held"]) for h in held_b] == [("default", "concurrency")]
    assert claim(conn, schema, ["default"], 5, owner="c")[0] == []
    assert len(complete(conn, schema, a, owner="a")) == 2
    c, _ = claim(conn, schema, ["default"], 5, owner="c")
    assert len(c) == 2 and leased(conn, schema, "default") == 3
    # A give-back releases too.
    q = for_schema(schema)
    conn.execute(q.unclaim, {"ids": [r["id"] for r in c], "tokens": [r["lease_token"] for r in c],
                             "owner": "c"})
    assert len(claim(conn, schema, ["default"], 5, owner="d")[0]) == 2


def test_the_reaper_releases_counted_leases(conn, client, schema):
    set_queue(conn, schema, "default", concurrency=2)
    client.enqueue_many([("t", i) for i in range(5)])
    first, _ = claim(conn, schema, ["default"], 5, owner="gone")
    assert len(first) == 2
    conn.execute(sql.SQL("UPDATE {} SET lease_expires_at = now() - interval '1 second'"
                         " WHERE status = 'leased'").format(sql.Identifier(schema, "jobs")))
    q = for_schema(schema)
    now = RetryPolicy(0.0, 2.0, 0.0)  # requeued to run at once
    assert len(conn.execute(q.reap_expired, reap_params(10, {}, now)).fetchall()) == 2
    assert len(claim(conn, schema, ["default"], 5, owner="b")[0]) == 2


def test_lowering_a_limit_takes_effect_at_the_next_claim(conn, client, schema):
    set_queue(conn, schema, "default", concurrency=4)
    client.enqueue_many([("t", i) for i in range(10)])
    first, _ = claim(conn, schema, ["default"], 2)
    set_queue(conn, schema, "default", concurrency=2)
    assert claim(conn, schema, ["default"], 5)[0] == []
    complete(conn, schema, first[:1])
    assert len(claim(conn, schema, ["default"], 5)[0]) == 1  # 1 leased, limit 2
    assert leased(conn, schema, "default") == 2
    set_queue(conn, schema, "default", concurrency=None)  # no limit: claims as many as asked
    assert len(claim(conn, schema, ["default"], 5)[0]) == 5


def test_a_paused_limited_queue_claims_nothing(conn, client, schema):
    set_queue(conn, schema, "default", concurrency=4, paused=True)
    client.enqueue_many([("t", i) for i in range(3)])
    assert claim(conn, schema, ["default"], 5) == ([], [])
    set_queue(conn, schema, "default", paused=False)
    assert len(claim(conn, schema, ["default"], 5)[0]) == 3


def test_rate_limit_holds_the_window_and_says_when_a_start_comes_back(conn, client, schema):
    set_queue(conn, schema, "default", rate_limit=3, rate_period="1 hour")
    client.enqueue_many([("t", i) for i in range(10)])
    first, _ = claim(conn, schema, ["default"], 2)
    second, held = claim(conn, schema, ["default"], 5)
    assert (len(first), len(second)) == (2, 1)
    assert [h["held"] for h in held] == ["rate"] and 3500 < held[0]["retry"] <= 3600 * 1.02 + 1  # a bucket is 1/50 of the period
    complete(conn, schema, first + second)
    assert claim(conn, schema, ["default"], 5)[0] == []  # completions give no starts back
    # Jobs over the limit stay queued, not failed.
    counts = conn.execute(sql.SQL("SELECT status, count(*) AS n FROM {} GROUP BY status").format(
        sql.Identifier(schema, "jobs"))).fetchall()
    assert {r["status"]: r["n"] for r in counts} == {"succeeded": 3, "queued": 7}


def test_a_concurrency_key_runs_one_at_a_time_and_others_pass_it(conn, client, schema):
    client.enqueue_many([{"task": "t", "payload": i, "concurrency_key": "customer:42"}
                         for i in range(5)])
    client.enqueue("t", "other", concurrency_key="customer:7")
    client.enqueue("t", "free")
    jobs, held = claim(conn, schema, ["default"], 10)
    assert len(jobs) == 3, jobs  # one of customer:42, customer:7, the job without a key
    again, _ = claim(conn, schema, ["default"], 10, owner="m2")
    assert again == []
    complete(conn, schema, [j for j in jobs if j["payload"] == "0"])
    again, _ = claim(conn, schema, ["default"], 10, owner="m2")
    assert [j["payload"] for j in again] == ["1"]


def test_key_concurrency_two(conn, client, schema):
    set_queue(conn, schema, "default", key_concurrency=2)
    client.enqueue_many([{"task": "t", "payload": i, "concurrency_key": "k"} for i in range(5)])
    jobs, held = claim(conn, schema, ["default"], 10)
    assert len(jobs) == 2
    assert claim(conn, schema, ["default"], 10)[0] == []
    complete(conn, schema, jobs[:1])
    assert len(claim(conn, schema, ["default"], 10)[0]) == 1


def test_racing_claims_for_one_key_take_one_slot(pg_dsn, client, schema):
    client.enqueue_many([{"task": "t", "payload": i, "concurrency_key": "k"} for i in range(50)])
    got: list[int] = []
    barrier = threading.Barrier(6)

    def racer(n: int) -> None:
        with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
            barrier.wait()
            for _ in range(5):
                got.extend(r["id"] for r in claim(c, schema, ["default"], 3, owner=f"m{n}")[0])

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1


def test_master_room_and_queue_orders(conn, client, schema):
    set_queue(conn, schema, "emails")
    client.enqueue_many([("t", f"d{i}") for i in range(4)], priority=5)
    client.enqueue_many([("t", f"e{i}") for i in range(4)], queue="emails", priority=9)
    both = ["emails", "default"]
    jobs, held = claim(conn, schema, both, 6, rooms=[1, None])
    assert sorted(j["queue"] for j in jobs) == ["default"] * 4 + ["emails"]
    assert [(h["queue"], h["held"]) for h in held] == [("emails", "master_limit")]


def test_priority_and_round_robin_orders(conn, client, schema):
    set_queue(conn, schema, "emails")
    client.enqueue_many([("t", f"d{i}") for i in range(4)], priority=5)
    client.enqueue_many([("t", f"e{i}") for i in range(4)], queue="emails", priority=9)
    both = ["emails", "default"]
    jobs, _ = claim(conn, schema, both, 2, order="global")
    assert [j["payload"] for j in jobs] == ['"d0"', '"d1"']
    jobs, _ = claim(conn, schema, both, 2, order="priority")
    assert [j["payload"] for j in jobs] == ['"e0"', '"e1"']
    jobs, _ = claim(conn, schema, both, 2, order="round_robin", turn=1)
    assert sorted(j["queue"] for j in jobs) == ["default", "emails"]


def test_queue_defaults_fill_priority_and_max_attempts(conn, client, schema):
    set_queue(conn, schema, "emails", priority_default=-7, max_attempts=9)
    one = client.enqueue("t", queue="emails").job
    assert (one.priority, one.max_attempts) == (-7, 9)
    assert client.enqueue("t", queue="emails", priority=3, max_attempts=2).job.priority == 3
    ids = [i for i, _ in client.enqueue_many([("t", 1), ("t", 2)], queue="emails")]
    ids += [i for i, _ in client.enqueue_many([{"task": "t", "idempotency_key": "x"}], queue="emails")]
    for job_id in ids:
        job = client.get(job_id)
        assert (job.priority, job.max_attempts) == (-7, 9)
    row = conn.execute(sql.SQL("SELECT * FROM {}.enqueue('t', queue => 'emails')").format(
        sql.Identifier(schema))).fetchone()
    assert (row["priority"], row["max_attempts"]) == (-7, 9)
    assert client.enqueue("t").job.max_attempts == 5  # default: max_attempts NULL


def test_bad_concurrency_keys_are_refused_everywhere(conn, client, schema):
    for bad in ("", "x" * 201, "a\nb"):
        with pytest.raises(InvalidInput, match="invalid concurrency key"):
            client.enqueue("t", concurrency_key=bad)
        with pytest.raises(InvalidInput, match="job 0: invalid concurrency key"):
            client.enqueue_many([{"task": "t", "concurrency_key": bad}])
        with pytest.raises(psycopg.Error, match="invalid concurrency key"):
            conn.execute(sql.SQL("SELECT * FROM {}.enqueue('t', concurrency_key => %s)").format(
                sql.Identifier(schema)), [bad])
    assert client.stats()[0].queued == 0
