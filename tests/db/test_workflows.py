"""Workflows against a real PostgreSQL (migration 0019, jobrun/workflows.py): a dependent is
released in the transaction that settles its last parent, guarded by the parent's lease
token; failures cancel down the graph, a retry revives, a workflow is cancelled and
replayed as a whole, and bad dependencies are refused with nothing stored."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from jobrun import workflows as wf
from jobrun.protocol import JobFrames, decode
from jobrun.sql import for_schema
from jobrun.errors import Conflict, InvalidInput, NotFound

from tests.dbview import lease
from tests.invariants import nothing_lost


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, row_factory=dict_row) as c:
        yield c


def finish(conn, schema, row, status="succeeded", outcome=None, result=None, owner="m1"):
    """End one leased job through finish_jobs, in conn's open transaction; the ids finished."""
    query = sql.SQL("SELECT {s}.finish_jobs(ARRAY[%s::bigint], ARRAY[%s::bigint], ARRAY[%s],"
                    " ARRAY[%s], 'nobody', %s, results => ARRAY[%s]) AS id").format(
        s=sql.Identifier(schema))
    outcome = outcome or {"dead": "failed"}.get(status, status)
    rows = conn.execute(query, [row["id"], row["lease_token"], status, outcome,
                                owner, json.dumps(result)]).fetchall()
    return [r["id"] for r in rows]


def cancel(conn, schema, job_id):
    """Cancel a job on conn (this backend: its function calls are counted at once)."""
    conn.execute(for_schema(schema).cancel_job, {"id": job_id, "version": None, "actor": None})
    conn.commit()


def run_next(conn, schema, result=None, status="succeeded", owner="m1"):
    """Lease the one runnable job and finish it, committed; the leased row."""
    [row] = lease(conn, schema, 1, owner)
    finish(conn, schema, row, status, result=result, owner=owner)
    conn.commit()
    return row


def test_a_chain_releases_each_step_at_its_parents_commit_with_its_result(client, conn, schema, db):
    made = client.enqueue_workflow(wf.chain("a", "b", "c"))
    a, b, c = made.job_ids
    assert made.created and db.statuses(made.job_ids) == {a: "queued", b: "waiting", c: "waiting"}
    [row] = lease(conn, schema, 5, "m1")  # only a is runnable
    assert row["id"] == a
    finish(conn, schema, row, result={"n": 1})
    # Released by the completion's own statement, seen by others at its commit.
    assert conn.execute(sql.SQL("SELECT status FROM {} WHERE id = %s").format(
        sql.Identifier(schema, "jobs")), [b]).fetchone()["status"] == "queued"
    assert db.statuses([b])[b] == "waiting"
    conn.commit()
    assert db.statuses([b, c]) == {b: "queued", c: "waiting"}
    assert client.get(b).parents == {str(a): {"n": 1}}
    run_next(conn, schema, result=2)
    assert client.get(c).parents == {str(b): 2} and db.statuses([c])[c] == "queued"


def test_a_rolled_back_completion_releases_nothing(client, conn, schema, db):
    a, b = client.enqueue_workflow(wf.chain("a", "b")).job_ids
    [row] = lease(conn, schema, 1, "m1")
    conn.commit()
    finish(conn, schema, row)
    conn.rollback()
    assert db.statuses([a, b]) == {a: "leased", b: "waiting"}


def test_a_fenced_attempt_releases_nothing(client, conn, schema, db):
    a, b = client.enqueue_workflow(wf.chain("a", "b")).job_ids
    [row] = lease(conn, schema, 1, "m1")
    conn.commit()
    assert finish(conn, schema, {**row, "lease_token": row["lease_token"] - 1}) == []
    conn.commit()
    assert finish(conn, schema, row, owner="m2") == []
    conn.commit()
    assert db.statuses([a, b]) == {a: "leased", b: "waiting"}
    assert finish(conn, schema, row) == [a]
    conn.commit()
    assert db.statuses([b])[b] == "queued"


def test_a_callback_waits_for_every_member_of_its_group(client, conn, schema, db):
    ids = client.enqueue_workflow(wf.chord(wf.group("p", "p", "p"), "cb")).job_ids
    parents, cb = ids[:3], ids[3]
    rows = lease(conn, schema, 10, "m1")
    conn.commit()
    assert sorted(r["id"] for r in rows) == parents
    for n, row in enumerate(rows):
        assert db.statuses([cb])[cb] == "waiting"
        finish(conn, schema, row, result=row["id"] * 10)
        conn.commit()
    assert db.statuses([cb])[cb] == "queued"
    assert client.get(cb).parents == {str(p): p * 10 for p in parents}


def test_a_dead_parent_cancels_down_the_graph_and_its_retry_revives(client, conn, schema, db):
    a, b, c = client.enqueue_workflow(wf.chain("a", "b", "c")).job_ids
    run_next(conn, schema, status="dead", result=None)
    assert db.statuses([a, b, c]) == {a: "dead", b: "cancelled", c: "cancelled"}
    assert client.get(b).cancel_reason == f"parent job {a} ended dead"
    assert client.get(c).cancel_reason == f"parent job {b} ended cancelled"
    client.retry(a)
    assert db.statuses([a, b, c]) == {a: "queued", b: "waiting", c: "waiting"}
    run_next(conn, schema)
    assert db.statuses([b, c]) == {b: "queued", c: "waiting"}


def test_on_parent_failure_run_runs_after_a_dead_parent(client, conn, schema, db):
    made = client.enqueue_workflow(wf.chain("a", wf.Step("b", on_parent_failure="run")))
    a, b = made.job_ids
    run_next(conn, schema, status="dead")
    assert db.statuses([b])[b] == "queued"
    assert client.get(b).parents == {str(a): None}


def test_enqueue_after_stored_jobs_and_a_finished_parent(client, conn, schema, db):
    p1 = client.enqueue("p").job.id
    run_next(conn, schema, result="r1")
    p2 = client.enqueue("p").job.id
    got = client.enqueue("child", {"x": 1}, after=[p1, p2])
    assert got.created and got.job.status == "waiting" and got.job.waiting_on == 1
    run_next(conn, schema, result="r2")
    job = client.get(got.job.id)
    assert job.status == "queued" and job.parents == {str(p1): "r1", str(p2): "r2"}
    done = client.enqueue("late", after=[p1])
    assert done.job.status == "queued" and done.job.parents == {str(p1): "r1"}


def test_cancelling_a_workflow_cancels_every_member_not_finished(client, conn, schema, db):
    made = client.enqueue_workflow(wf.chain("a", wf.group("b", "c"), "d"))
    a, b, c, d = made.job_ids
    run_next(conn, schema)
    [row] = lease(conn, schema, 1, "m1")  # b leased
    conn.commit()
    changed = client.cancel_workflow(made.id)
    assert sorted(changed) == [b, c, d]
    assert db.statuses(made.job_ids) == {a: "succeeded", b: "leased", c: "cancelled", d: "cancelled"}
    assert db.job(b)["cancel_requested"]
    assert client.workflow(made.id).status == "running"
    with pytest.raises(NotFound):
        client.cancel_workflow(made.id + 1000)


def test_cancelling_a_waiting_job_cancels_its_dependents(client, schema, db):
    a, b, c = client.enqueue_workflow(wf.chain("a", "b", "c")).job_ids
    assert client.cancel(b).status == "cancelled"
    assert db.statuses([a, b, c]) == {a: "queued", b: "cancelled", c: "cancelled"}


def test_unknown_parents_and_cycles_are_refused_with_nothing_stored(client, schema, db):
    before = db.count()
    with pytest.raises(NotFound, match="^no job 999999 to wait for$"):
        client.enqueue("x", after=[999999])
    with pytest.raises(InvalidInput, match="^a cycle: "):
        wf.graph({"a": "t", "b": "t"}, after={"a": ["b"], "b": ["a"]})
    with pytest.raises(psycopg.Error, match="would make a cycle or is out of order") as raised:
        db.rows("SELECT {s}.enqueue_workflow(ARRAY['a','b'], edge_dependents => ARRAY[1],"
                " parent_items => ARRAY[2], parent_jobs => ARRAY[NULL::bigint])")
    assert raised.value.sqlstate == "JR001"
    assert db.count() == before
    assert db.rows("SELECT count(*) AS n FROM {s}.workflows")[0]["n"] == 0


def test_a_workflow_replays_whole_under_its_key(client, db):
    flow = wf.chord(wf.group("p", "p"), "cb")
    first = client.enqueue_workflow(flow, idempotency_key="k1")
    again = client.enqueue_workflow(flow, idempotency_key="k1")
    assert first.created and not again.created
    assert (again.id, again.job_ids) == (first.id, first.job_ids)
    assert db.count() == 3
    with pytest.raises(Conflict, match="another definition"):
        client.enqueue_workflow(wf.chain("p", "cb"), idempotency_key="k1")
    assert db.count() == 3


def test_the_workflow_view_lists_members_and_edges(client):
    made = client.enqueue_workflow(wf.chord(["p", "q"], "cb"))
    view = client.workflow(made.id)
    assert view.shape == "chord" and view.status == "running"
    assert [j["after"] for j in view.jobs] == [[], [], made.job_ids[:2]]


def test_purge_takes_a_workflow_whole_once_every_member_finished(client, conn, schema, db):
    made = client.enqueue_workflow(wf.chain("a", "b"))
    run_next(conn, schema)
    db.rows("UPDATE {s}.jobs SET finished_at = now() - interval '2 days' WHERE status = 'succeeded'"
            " RETURNING id")
    db.rows("UPDATE {s}.workflows SET created_at = now() - interval '2 days' RETURNING id")
    assert client.purge("1d") == 0  # b is still queued: nothing of the workflow goes
    run_next(conn, schema)
    db.rows("UPDATE {s}.jobs SET finished_at = now() - interval '2 days' RETURNING id")
    assert client.purge("1d", statuses=["dead"]) == 0  # a workflow goes whole or not at all
    assert client.purge("1d") == 2
    assert db.count() == 0 and db.rows("SELECT count(*) AS n FROM {s}.job_deps")[0]["n"] == 0


def test_the_shared_checker_sees_a_stuck_dependent_and_one_started_too_early(client, conn, schema, db):
    a, b = client.enqueue_workflow(wf.chain("a", "b")).job_ids
    run_next(conn, schema)
    assert nothing_lost(db.conn, schema) == []
    # Forged: b back to waiting though its parent succeeded; c started while its parent waits.
    db.rows("UPDATE {s}.jobs SET status = 'waiting' WHERE id = %s RETURNING id", (b,))
    c, d = client.enqueue_workflow(wf.chain("c", "d")).job_ids
    db.rows("UPDATE {s}.jobs SET attempts = 1, started_at = now() WHERE id = %s RETURNING id", (d,))
    found = set(nothing_lost(db.conn, schema))
    assert ("waiting with no parent unsettled", b) in found
    assert ("started before its parents all succeeded", d) in found


def test_a_workflow_in_the_callers_transaction_goes_with_its_rollback(client, pg_dsn, db):
    with psycopg.connect(pg_dsn) as mine:
        made = client.enqueue_workflow(wf.chain("a", "b"), conn=mine)
        assert len(made.job_ids) == 2
        mine.rollback()
    assert db.count() == 0 and db.rows("SELECT count(*) AS n FROM {s}.workflows")[0]["n"] == 0


def test_the_async_client_enqueues_reads_and_cancels_a_workflow(pg_dsn, schema, db):
    import asyncio

    import jobrun

    async def scenario():
        async with jobrun.AsyncClient(pg_dsn, schema=schema) as aclient:
            made = await aclient.enqueue_workflow(wf.chord(["p", "q"], "cb"), idempotency_key="a")
            after = await aclient.enqueue("d", after=[made.job_ids[-1]])
            view = await aclient.workflow(made.id)
            cancelled = await aclient.cancel_workflow(made.id)
            return made, after, view, cancelled

    made, after, view, cancelled = asyncio.run(scenario())
    assert view.shape == "chord" and after.job.status == "waiting"
    assert sorted(cancelled) == made.job_ids
    # The job after the cancelled callback (another workflow) is cancelled with it.
    assert db.statuses([after.job.id]) == {after.job.id: "cancelled"}


def test_jobs_without_dependents_never_call_the_trigger_and_claim_their_payload_alone(
        client, conn, schema, db):
    """The hot path's cost for ordinary jobs: neither settle function is called at all for
    them (finish_jobs calls settle_batch only for a batch holding parents; the trigger's WHEN
    keeps its function out; pg_stat_user_functions counts calls), and the claim returns the
    payload text as it was."""
    def calls() -> dict[str, int]:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.commit()  # the flush happens as this transaction ends
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute("SELECT funcname, calls FROM pg_stat_user_functions"
                            " WHERE schemaname = %s AND funcname LIKE 'settle%%'",
                            [schema]).fetchall()
        conn.commit()
        return {r["funcname"]: r["calls"] for r in rows}

    conn.execute("SET track_functions = 'pl'")
    conn.commit()
    ids = [client.enqueue("plain", {"n": n}).job.id for n in range(3)]
    rows = lease(conn, schema, 3, "m1")
    assert sorted(json.loads(r["payload"])["n"] for r in rows) == [0, 1, 2]
    for row in rows:
        finish(conn, schema, row)
    conn.commit()
    cancel(conn, schema, client.enqueue("plain").job.id)  # a status change outside finish_jobs
    assert calls() == {}
    # A parent's completion does call it; and its dependent's claim carries its parents.
    a, b = client.enqueue_workflow(wf.chain(wf.Step("p"), wf.Step("c", {"x": 1}))).job_ids
    run_next(conn, schema, result=[7])
    assert calls() == {"settle_batch": 1}
    [row] = lease(conn, schema, 1, "m1")
    assert row["id"] == b
    frame = JobFrames("m1").frame(id=b, token=row["lease_token"], task="c", queue="default",
                                  attempt=1, max_attempts=5, priority=0, created_at=0.0,
                                  key=None, traceparent=None, payload_text=row["payload"])
    decoded = decode(frame[4:])
    assert decoded["payload"] == {"x": 1} and decoded["parents"] == {str(a): [7]}
    assert db.statuses(ids) == {i: "succeeded" for i in ids}
    x, y = client.enqueue_workflow(wf.chain("x", "y")).job_ids
    cancel(conn, schema, x)
    assert calls() == {"settle_batch": 1, "settle_dependents": 1}
    assert db.statuses([x, y]) == {x: "cancelled", y: "cancelled"}


def test_a_release_wakes_the_masters_at_its_commit(client, conn, schema, pg_dsn):
    a, b = client.enqueue_workflow(wf.chain("a", wf.Step("b", queue="default"))).job_ids
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"{schema}_ready")))
        [row] = lease(conn, schema, 1, "m1")
        conn.commit()
        finish(conn, schema, row)
        assert list(listener.notifies(timeout=0.2, stop_after=1)) == []  # not before the commit
        conn.commit()
        woken = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in woken] == [(f"{schema}_ready", "default")]


def finish_batch(conn, schema, rows, statuses, results):
    """End several leases in one finish_jobs call (a completion batch), committed."""
    outcomes = [{"dead": "failed"}.get(s, s) for s in statuses]
    conn.execute(sql.SQL("SELECT {s}.finish_jobs(%s::bigint[], %s::bigint[], %s::text[],"
                         " %s::text[], 'none', 'm1', results => %s::text[])").format(
        s=sql.Identifier(schema)),
        [[r["id"] for r in rows], [r["lease_token"] for r in rows], statuses, outcomes,
         [json.dumps(x) for x in results]]).fetchall()
    conn.commit()


def test_one_batch_settles_many_parents_with_their_results(client, conn, schema, db):
    ids = client.enqueue_workflow(wf.chord(["p"] * 4, "cb")).job_ids
    parents, cb = ids[:4], ids[4]
    rows = sorted(lease(conn, schema, 10, "m1"), key=lambda r: r["id"])
    conn.commit()
    finish_batch(conn, schema, rows[:1], ["succeeded"], ["first"])
    finish_batch(conn, schema, rows[1:], ["succeeded"] * 3, [10, {"k": [1]}, None])
    job = client.get(cb)
    assert job.status == "queued" and job.waiting_on == 0
    assert job.parents == {str(parents[0]): "first", str(parents[1]): 10,
                           str(parents[2]): {"k": [1]}, str(parents[3]): None}


def test_a_batch_with_a_dead_parent_cancels_and_a_run_dependent_counts_it(client, conn, schema, db):
    made = client.enqueue_workflow(wf.graph(
        {"a": "p", "b": "p", "cancel": "c", "run": wf.Step("r", on_parent_failure="run")},
        after={"cancel": ["a", "b"], "run": ["a", "b"]}))
    a, b, cancel_id, run_id = made.job_ids
    rows = sorted(lease(conn, schema, 10, "m1"), key=lambda r: r["id"])
    conn.commit()
    finish_batch(conn, schema, rows, ["succeeded", "dead"], ["ok", None])
    assert db.statuses([cancel_id, run_id]) == {cancel_id: "cancelled", run_id: "queued"}
    assert client.get(cancel_id).cancel_reason == f"parent job {b} ended dead"
    assert client.get(run_id).parents == {str(a): "ok", str(b): None}
    assert nothing_lost(db.conn, schema) == []
