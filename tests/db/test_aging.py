"""Priority aging against a real PostgreSQL: what a sweep writes, that it reads only what it
promotes (not the queue), that concurrent sweeps promote a job once, and that the claim and
the sweep stay on the jobs_claim index at 100k queued rows."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.store import db
from jobrun.worker.aging import AgingSweeper
from jobrun.worker.claimer import claim_params, plain_claim_params


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def fill(conn, schema, queue, n, priority, waited, spread=None):
    """n queued jobs of `queue` at `priority` (or a spread of priorities) runnable since
    `waited` ago."""
    prio = sql.SQL(spread) if spread else sql.Literal(priority)
    conn.execute(sql.SQL(
        "INSERT INTO {} (queue, task, priority, run_at)"
        " SELECT {}, 't', {}, now() - {}::interval FROM generate_series(1, {}) AS i").format(
            sql.Identifier(schema, "jobs"), sql.Literal(queue), prio, sql.Literal(waited),
            sql.Literal(n)))


def jobs(conn, schema, where="true"):
    return conn.execute(sql.SQL(
        "SELECT id, queue, priority, base_priority, version,"
        " extract(epoch FROM aged_at - run_at)::float8 AS aged_after FROM {} WHERE "
        + where + " ORDER BY id").format(sql.Identifier(schema, "jobs"))).fetchall()


def age(conn, schema, queues, batch=500):
    return conn.execute(for_schema(schema).age_queued,
                        {"queues": queues, "batch": batch, "start": -100}).fetchall()


def test_a_sweep_writes_the_steps_owed(client, conn, schema):
    client.queue_add("aged", aging="1m")
    client.queue_add("plain")
    fill(conn, schema, "aged", 1, 10, "150 seconds")    # owed 2 steps
    fill(conn, schema, "aged", 1, 10, "30 seconds")     # owed none yet
    fill(conn, schema, "aged", 1, -99, "1 hour")        # owed 60, capped at -100
    fill(conn, schema, "aged", 1, -100, "1 hour")       # already at the top
    fill(conn, schema, "plain", 1, 10, "1 hour")        # its queue does not age
    assert len(age(conn, schema, ["aged", "plain"])) == 2
    got = [(j["priority"], j["base_priority"], j["aged_after"]) for j in jobs(conn, schema)]
    assert got == [(8, 10, 120.0), (10, None, None), (-100, -99, 60.0), (-100, None, None),
                   (10, None, None)]
    assert age(conn, schema, ["aged", "plain"]) == []  # nothing more is owed yet


def test_steps_are_due_from_run_at_so_a_late_sweep_does_not_delay_the_next(client, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 1, 50, "61 seconds")
    age(conn, schema, ["aged"])
    # the next step is due at run_at + 2m, i.e. in 59 s, not 60 s after the sweep
    conn.execute(sql.SQL("UPDATE {} SET run_at = run_at - interval '59 seconds',"
                         " aged_at = aged_at - interval '59 seconds'").format(
                             sql.Identifier(schema, "jobs")))
    assert len(age(conn, schema, ["aged"])) == 1
    assert [(j["priority"], j["aged_after"]) for j in jobs(conn, schema)] == [(48, 120.0)]


def test_concurrent_sweeps_promote_a_job_once(client, pg_dsn, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 50, 5, "90 seconds")
    with psycopg.connect(pg_dsn, row_factory=dict_row) as other:  # a transaction held open
        assert len(age(other, schema, ["aged"])) == 50
        assert age(conn, schema, ["aged"]) == []  # every row locked: skipped
        other.commit()
    assert age(conn, schema, ["aged"]) == []  # promoted rows are not due again
    # Promoted once (one step); an aging step leaves the version (docs/concepts.md).
    assert {(j["priority"], j["version"]) for j in jobs(conn, schema)} == {(4, 0)}


def test_a_sweep_reads_what_it_promotes_not_the_queue(client, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 100_000, 0, "0 seconds", spread="(i % 21) * 5")
    fill(conn, schema, "aged", 10, 50, "1 hour")
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))
    conn.execute("BEGIN")
    try:
        plan = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + for_schema(schema).age_queued,
            {"queues": ["aged"], "batch": 500, "start": -100}
        ).fetchone()["QUERY PLAN"][0]["Plan"]
    finally:
        conn.execute("ROLLBACK")
    read = []

    def walk(node):
        if node.get("Relation Name") == "jobs" and "Scan" in node["Node Type"]:
            read.append((node["Node Type"], node.get("Index Name"),
                         node["Actual Rows"] * node["Actual Loops"]
                         + node.get("Rows Removed by Filter", 0)))
        for child in node.get("Plans", ()):
            walk(child)
    walk(plan)
    assert read and all(kind == "Index Scan" or kind == "Index Only Scan" for kind, _, _ in read), read
    assert {name for _, name, _ in read} <= {"jobs_claim", "jobs_pkey"}, read
    # 22 levels found by one descent each, 10 rows promoted: nowhere near the 100,010 queued
    assert sum(n for _, _, n in read) < 200, read


def test_claim_and_sweep_plans_stay_on_the_index_at_100k(client, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 100_000, 0, "0 seconds", spread="(i % 201) - 100")
    fill(conn, schema, "aged", 5_000, 100, "5 minutes")
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "jobs")))
    assert len(age(conn, schema, ["aged"], batch=10_000)) == 5_000  # aging has moved rows
    q = for_schema(schema)
    for name, params in [("claim_jobs", claim_params(["aged"], 50, "o", 30)),
                         ("claim_plain", plain_claim_params("aged", 50, "o", 30)),
                         ("age_queued", {"queues": ["aged"], "batch": 500, "start": -100})]:
        rows = conn.execute("EXPLAIN " + getattr(q, name), params).fetchall()
        text = "\n".join(r["QUERY PLAN"] for r in rows)
        assert "Scan using jobs_claim on jobs" in text and "Seq Scan on jobs" not in text, (name, text)


def test_the_sweeper_service_sweeps_on_its_interval_and_counts(client, pg_dsn, conn, schema):
    client.queue_add("aged", aging="40ms")
    client.queue_add("plain")
    fill(conn, schema, "aged", 3, 0, "1 second")
    counted = {}
    sweeper = AgingSweeper(pg_dsn, for_schema(schema), ["aged", "plain"],
                           on_aged=lambda queue, n: counted.__setitem__(queue, n))

    async def go():
        c = await db.connect_async(pg_dsn)
        try:
            first = await sweeper.sweep(c, 100.0)
            again = await sweeper.sweep(c, 100.001)  # not due again yet: no statement
            return first, again
        finally:
            await c.close()

    first, again = asyncio.run(go())
    assert first == pytest.approx(0.01) and 0 < again <= 0.01
    assert counted == {"aged": 3} and sweeper.aged == 3
    assert {j["priority"] for j in jobs(conn, schema)} == {-25}
    assert sweeper.intervals == {"aged": 0.01}


def test_an_operator_retry_starts_afresh_at_the_enqueued_priority(client, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 1, 30, "10 minutes")
    age(conn, schema, ["aged"])
    [job] = jobs(conn, schema)
    assert (job["priority"], job["base_priority"]) == (20, 30)
    client.cancel(job["id"])
    back = client.retry(job["id"])
    assert (back.priority, back.base_priority, back.aged_at) == (30, None, None)


def test_a_pass_runs_at_most_max_batches_statements_and_the_next_follows_at_once(
        client, pg_dsn, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 25, 10, "5 minutes")  # each owed 5 steps
    sweeper = AgingSweeper(pg_dsn, for_schema(schema), ["aged"], batch=4, max_batches=3)

    async def go():
        c = await db.connect_async(pg_dsn)
        try:
            waits = [await sweeper.sweep(c, 100.0)]  # 3 statements of 4: cut short
            promoted = sweeper.aged
            while sweeper.aged < 25:
                waits.append(await sweeper.sweep(c, 100.0))
            statements = sweeper.statements
            await sweeper.sweep(c, 100.0)  # nothing owed: back on its interval, no statement
            return promoted, waits, statements
        finally:
            await c.close()

    promoted, waits, statements = asyncio.run(go())
    assert promoted == 12
    assert waits[:2] == [0.0, 0.0] and waits[2] > 0 and len(waits) == 3, waits  # 12, 12, 1
    assert statements == 7 and sweeper.statements == 7
    assert {j["priority"] for j in jobs(conn, schema)} == {5}


def test_a_walk_resumes_at_the_level_where_a_full_batch_stopped(client, pg_dsn, conn, schema):
    client.queue_add("aged", aging="1m")
    fill(conn, schema, "aged", 4, 5, "90 seconds")   # owed a step each
    fill(conn, schema, "aged", 4, 50, "90 seconds")
    below = conn.execute(for_schema(schema).age_queued,
                         {"queues": ["aged"], "batch": 10, "start": 10}).fetchall()
    assert [(r["queue"], r["level"]) for r in below] == [("aged", 50)] * 4  # level 5 not read
    conn.execute(sql.SQL("UPDATE {} SET priority = coalesce(base_priority, priority), base_priority = NULL,"
                         " aged_at = NULL").format(sql.Identifier(schema, "jobs")))
    sweeper = AgingSweeper(pg_dsn, for_schema(schema), ["aged"], batch=4, max_batches=1)

    async def go():
        c = await db.connect_async(pg_dsn)
        try:
            starts = []
            for _ in range(3):
                await sweeper.sweep(c, 100.0)
                starts.append(sweeper._start.get("aged"))
            return starts
        finally:
            await c.close()

    # a full batch at level 5, then one at level 50 (the walk resumed at 5), then the top
    assert asyncio.run(go()) == [5, 50, None]
    assert sweeper.statements == 3 and sweeper.aged == 8
    assert sorted(j["priority"] for j in jobs(conn, schema)) == [4] * 4 + [49] * 4
