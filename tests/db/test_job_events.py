"""The transition log (migration 0017): every transition of a job is an event written in the
statement, and so the transaction, that makes it, by every writer of jobs; the mode keeps
all, the terminal or none of them; a deleted job takes its events with it."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.rows import dict_row

import jobrun
from jobrun import events
from jobrun.errors import InvalidInput
from jobrun.sql import for_schema
from jobrun.states import OUTCOMES, STATUSES
from jobrun.worker.claimer import plain_claim_params
from jobrun.worker.reaper import Reaper
from tests.db.test_producer_rows import producer, producer_dsn  # noqa: F401 (fixtures)
from jobrun.testing import wait_for
from tests.dbview import lease
from tests.invariants import event_violations
from tests.profiles import examples

OWNER = "m1"


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def kinds(db, job_id: int) -> list[str]:
    return [r["kind"] for r in db.rows("SELECT kind FROM {s}.job_events WHERE job_id = %s"
                                       " ORDER BY seq", (job_id,))]


def finish(conn, schema, rows, status, outcome, owner=OWNER, **arrays) -> list[int]:
    """Ends the leases in ``rows`` through complete_jobs (finish_jobs), as a master does."""
    n = len(rows)
    params = {"ids": [r["id"] for r in rows], "tokens": [r["lease_token"] for r in rows],
              "statuses": [status] * n, "outcomes": [outcome] * n, "owner": owner,
              "host": "h", "pid": 1}
    for name in ("delays", "errors", "tracebacks", "results", "children", "crashed", "logs",
                 "refunds"):
        params[name] = arrays.get(name)
    return [r["job_id"] for r in conn.execute(for_schema(schema).complete_jobs, params)]


def test_a_job_that_succeeds_records_enqueued_claimed_succeeded(client, conn, db, schema):
    job = client.enqueue("t", {"n": 1}).job
    [row] = lease(conn, schema, 1, OWNER)
    assert finish(conn, schema, [row], "succeeded", "succeeded") == [job.id]
    found = client.events(job.id)
    assert [e.event for e in found] == ["enqueued", "claimed", "succeeded"]
    assert [e.status for e in found] == ["queued", "leased", "succeeded"]
    assert found[1].owner == OWNER and found[1].attempt == 1 and found[1].lease_token == 1
    assert found[2].outcome == "succeeded" and found[2].owner == OWNER
    assert found[2].at == db.job(job.id)["finished_at"]
    assert [e.seq for e in found] == sorted(e.seq for e in found)
    assert event_violations(db.conn, schema) == []  # the shared check agrees


def test_retried_dead_released_and_given_back_are_told_apart(client, conn, db, schema):
    ids = [j for j, _ in client.enqueue_many([("t", {"n": i}) for i in range(4)])]
    rows = {r["id"]: r for r in lease(conn, schema, 4, OWNER)}
    a, b, c, d = (rows[i] for i in ids)
    finish(conn, schema, [a], "queued", "failed", delays=[30.0], errors=["boom"])
    finish(conn, schema, [b], "dead", "failed", errors=["ValueError: no\n  trace"])
    finish(conn, schema, [c], "queued", "released", refunds=[1])
    given_back = conn.execute(for_schema(schema).unclaim, {
        "ids": [d["id"]], "tokens": [d["lease_token"]], "owner": OWNER}).fetchone()
    assert given_back["given_back"] == 1
    assert [kinds(db, i)[-1] for i in ids] == ["retried", "dead", "released", "given_back"]
    retried = client.events(a["id"])[-1]
    assert retried.outcome == "failed" and retried.status == "queued"
    assert 29.0 <= retried.detail["delay"] <= 30.0  # the delay, and when it runs again
    assert retried.detail["run_at"]
    dead = client.events(b["id"])[-1]
    assert dead.outcome == "failed" and dead.detail == {"error": "ValueError: no\n  trace"}
    assert client.events(c["id"])[-1].attempt == 0  # the released start does not count
    assert client.events(d["id"])[-1].outcome is None


def test_the_plain_claim_records_claimed(client, conn, db, schema):
    job = client.enqueue("t").job
    rows = conn.execute(for_schema(schema).claim_plain,
                        plain_claim_params("default", 5, OWNER, 60)).fetchall()
    assert [r["id"] for r in rows] == [job.id]
    assert kinds(db, job.id) == ["enqueued", "claimed"]


def test_a_batch_of_100_completions_is_100_events_of_one_statement(client, conn, db, schema):
    client.enqueue_many([("t", {"n": i}) for i in range(100)])
    rows = lease(conn, schema, 100, OWNER)
    assert len(finish(conn, schema, rows, "succeeded", "succeeded")) == 100
    [count] = db.rows("SELECT count(*) AS n, count(DISTINCT at) AS times FROM {s}.job_events"
                      " WHERE kind = 'succeeded'")
    assert count == {"n": 100, "times": 1}


def test_cancel_names_its_caller_and_a_leased_cancel_is_asked_then_ends(client, conn, db, schema):
    queued = client.enqueue("t").job
    client.cancel(queued.id, actor="cli:ann@box")
    assert [(e.event, e.actor) for e in client.events(queued.id)][-1] == ("cancelled", "cli:ann@box")
    running = client.enqueue("t").job
    [row] = lease(conn, schema, 1, OWNER)
    client.cancel(running.id)  # no actor: the database role
    role = conn.execute("SELECT session_user AS u").fetchone()["u"]
    asked = client.events(running.id)[-1]
    assert (asked.event, asked.status, asked.actor) == ("cancel_requested", "leased", role)
    finish(conn, schema, [row], "cancelled", "cancelled")
    assert kinds(db, running.id) == ["enqueued", "claimed", "cancel_requested", "cancelled"]
    again = client.retry(running.id, actor="api:10.0.0.1")
    last = client.events(again.id)[-1]
    assert (last.event, last.status, last.actor) == ("requeued", "queued", "api:10.0.0.1")


def test_a_bad_actor_is_one_clear_line_and_changes_nothing(client, db):
    job = client.enqueue("t").job
    for bad in ("", "x" * 201, "a\nb", 5):
        with pytest.raises(InvalidInput, match="invalid actor"):
            client.cancel(job.id, actor=bad)
    assert db.job(job.id)["status"] == "queued" and kinds(db, job.id) == ["enqueued"]


def test_the_reaper_records_reaped_and_dead_with_lease_expired(client, conn, db, schema, pg_dsn):
    again = client.enqueue("t", max_attempts=3).job
    spent = client.enqueue("t", max_attempts=1).job
    lease(conn, schema, 2, OWNER)
    db.rows("UPDATE {s}.jobs SET lease_expires_at = now() - interval '1 s' RETURNING id")
    reaper = Reaper(pg_dsn, for_schema(schema), interval=1.0, retention=0.0)

    async def reap() -> int:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True,
                                                         row_factory=dict_row) as aconn:
            return await reaper.reap(aconn)

    assert asyncio.run(reap()) == 2
    reaped, dead = client.events(again.id)[-1], client.events(spent.id)[-1]
    assert (reaped.event, reaped.outcome, reaped.owner) == ("reaped", "lease_expired", OWNER)
    assert "delay" in reaped.detail
    assert (dead.event, dead.outcome) == ("dead", "lease_expired")


def test_heartbeats_and_aging_write_nothing(client, conn, db, schema):
    job = client.enqueue("t").job
    [row] = lease(conn, schema, 1, OWNER)
    conn.execute(for_schema(schema).heartbeat, {"ids": [row["id"]], "tokens": [row["lease_token"]],
                                                "owner": OWNER, "ttl": 30})
    assert kinds(db, job.id) == ["enqueued", "claimed"]


def test_a_lost_lease_is_noted_by_the_master_that_lost_it(client, conn, db, schema):
    job = client.enqueue("t").job
    [row] = lease(conn, schema, 1, OWNER)
    assert finish(conn, schema, [row], "succeeded", "succeeded", owner="other") == []
    written = conn.execute(for_schema(schema).note_lease_lost, {
        "ids": [job.id], "tokens": [row["lease_token"]], "owner": "other",
        "reason": "outcome refused"}).fetchone()["written"]
    assert written == 1
    lost = client.events(job.id)[-1]
    assert (lost.event, lost.status, lost.owner) == ("lease_lost", "leased", "other")
    assert lost.detail == {"reason": "outcome refused"}


def test_a_note_racing_the_new_holders_completion_follows_it(client, conn, db, schema, pg_dsn):
    """The note of a refused outcome and the completion of the job's new holder, at once: the
    note waits for that transition and records the status it left, after it (read first, its
    stale 'leased' came after 'succeeded' in the log: a failover test under load found it)."""
    import threading

    job = client.enqueue("t").job
    [first] = lease(conn, schema, 1, OWNER)
    conn.execute(f'UPDATE "{schema}".jobs SET status = \'queued\', lease_owner = NULL'
                 " WHERE id = %s", (job.id,))  # (as the reaper would, after its holder froze)
    [second] = lease(conn, schema, 1, "m2")
    with psycopg.connect(pg_dsn, row_factory=dict_row) as tx:  # the new holder, not committed
        finish(tx, schema, [second], "succeeded", "succeeded", owner="m2")
        noted = threading.Thread(target=lambda: psycopg.connect(pg_dsn, autocommit=True).execute(
            for_schema(schema).note_lease_lost, {"ids": [job.id], "tokens": [first["lease_token"]],
                                                 "owner": OWNER, "reason": "outcome refused"}))
        noted.start()
        wait_for(lambda: not noted.is_alive() or conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE '%%note_lease_lost%%'").fetchone()["n"], timeout=10,
            message="the note to finish or to wait on the job's row")
        assert noted.is_alive(), "the note did not wait for the transition in flight"
        tx.commit()
    noted.join(10)
    story = client.events(job.id)
    assert [(e.event, e.status) for e in story[-2:]] == [("succeeded", "succeeded"),
                                                          ("lease_lost", "succeeded")]
    assert event_violations(db.conn, schema) == []


@pytest.mark.parametrize("change", ["cancel", "complete", "enqueue"])
def test_a_change_rolled_back_leaves_no_event(client, conn, db, schema, pg_dsn, change):
    job = client.enqueue("t").job
    rows = lease(conn, schema, 1, OWNER) if change == "complete" else []
    before = db.rows("SELECT count(*) AS n FROM {s}.job_events")[0]["n"]
    with psycopg.connect(pg_dsn, row_factory=dict_row) as tx:  # not autocommit
        if change == "cancel":
            client.cancel(job.id, actor="cli:x", conn=tx)
        elif change == "complete":
            finish(tx, schema, rows, "succeeded", "succeeded")
        else:
            client.enqueue("t", conn=tx)
        inside = tx.execute(f'SELECT count(*) AS n FROM "{schema}".job_events').fetchone()["n"]
        assert inside == before + 1  # written in the transaction of the change...
        tx.rollback()
    assert db.rows("SELECT count(*) AS n FROM {s}.job_events")[0]["n"] == before  # ...and gone


def test_the_mode_keeps_all_terminal_or_none(client, conn, db, schema):
    assert client.events_mode() == "all"
    assert client.set_events_mode("terminal") == "terminal"
    job = client.enqueue("t").job
    [row] = lease(conn, schema, 1, OWNER)
    finish(conn, schema, [row], "succeeded", "succeeded")
    assert kinds(db, job.id) == ["succeeded"]
    assert client.set_events_mode("none") == "none"
    other = client.enqueue("t").job
    client.cancel(other.id)
    assert kinds(db, other.id) == []
    assert client.set_events_mode("all") == "all"
    client.retry(other.id)
    assert kinds(db, other.id) == ["requeued"]


def test_a_bad_mode_is_one_clear_line_and_changes_nothing(client, db):
    with pytest.raises(InvalidInput, match="invalid events mode 'some': one of none, terminal, all"):
        client.set_events_mode("some")
    with pytest.raises(psycopg.errors.CheckViolation, match="job_events_level"):
        db.rows("INSERT INTO {s}.settings (name, value) VALUES ('job_events', 5) RETURNING name")
    assert client.events_mode() == "all"


def test_a_deleted_or_purged_job_takes_its_events(client, conn, db, schema):
    ids = [j for j, _ in client.enqueue_many([("t", {}), ("t", {}), ("t", {})])]
    for job_id in ids:
        client.cancel(job_id)
    client.delete(ids[0])
    db.rows("UPDATE {s}.jobs SET finished_at = now() - interval '2 days' WHERE id = %s"
            " RETURNING id", (ids[1],))
    assert client.purge("1d") == 1
    left = db.rows("SELECT DISTINCT job_id FROM {s}.job_events")
    assert [r["job_id"] for r in left] == [ids[2]]


def test_events_of_an_unknown_job_are_not_found(client):
    with pytest.raises(jobrun.NotFound, match="no job 424242"):
        client.events(424242)
    assert client.events(client.enqueue("t").job.id)  # a known one has its enqueue


@settings(max_examples=examples(300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=st.one_of(st.none(), st.sampled_from(STATUSES)), new=st.sampled_from(STATUSES),
       outcome=st.one_of(st.none(), st.sampled_from(OUTCOMES)), up=st.booleans(),
       asked=st.booleans(), moved=st.booleans())
def test_the_sql_rule_is_the_python_rule(conn, schema, old, new, outcome, up, asked, moved):
    [row] = conn.execute(f'SELECT "{schema}".event_kind(%s, %s, %s, %s, %s, %s) AS k',
                         [old, new, outcome, up, asked, moved]).fetchall()
    assert row["k"] == events.kind(old, new, outcome, attempts_up=up, cancel_asked=asked,
                                   version_moved=moved)


def test_the_kinds_the_table_accepts_are_the_modules(admin_conn, schema):
    from tests.db.test_states import difference, quoted_values, table_check
    check = table_check(admin_conn, schema, "job_events", "event_kind_valid")
    assert difference(quoted_values(check), events.KINDS) is None


def test_the_shared_check_finds_a_story_that_does_not_hold(client, conn, db, schema):
    done, other = (client.enqueue("t").job for _ in range(2))
    rows = {r["id"]: r for r in lease(conn, schema, 2, OWNER)}
    finish(conn, schema, [rows[done.id]], "succeeded", "succeeded")
    assert event_violations(db.conn, schema) == []
    # A terminal event lost, and a second one for a job still running:
    db.rows("DELETE FROM {s}.job_events WHERE job_id = %s AND kind = 'succeeded' RETURNING seq",
            (done.id,))
    db.rows("INSERT INTO {s}.job_events (job_id, kind, status) VALUES (%s, 'dead', 'dead')"
            " RETURNING seq", (other.id,))
    found = {(problem, job_id) for problem, job_id in event_violations(db.conn, schema)}
    assert ("events: terminal events not one per finish", done.id) in found
    assert ("events: last status recorded is not the status", done.id) in found
    assert ("events: terminal events not one per finish", other.id) in found
    # Once the mode is not all, the log is not expected to tell everything:
    client.set_events_mode("terminal")
    assert event_violations(db.conn, schema) == []


class _Child:
    """What the heartbeater signals: it records the signals."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def signal(self, signum: int) -> None:
        self.signals.append(signum)


def test_a_master_notes_the_leases_it_finds_lost(client, conn, db, schema, pg_dsn):
    """The heartbeater whose renewal is refused and the completer whose outcome is refused each
    write lease_lost: the job's row did not change, so no trigger could."""
    import time

    from jobrun.worker.completer import Completer, Completion
    from jobrun.worker.heartbeat import Heartbeater, Lease

    renewed, completed = (client.enqueue("t").job.id for _ in range(2))
    token = {r["id"]: r["lease_token"] for r in lease(conn, schema, 2, OWNER)}
    # Another master took both over (the reaper requeued them, a claim leased them again).
    db.rows("UPDATE {s}.jobs SET lease_owner = 'other', lease_token = lease_token + 1"
            " RETURNING id")
    child = _Child()
    hb = Heartbeater(pg_dsn, for_schema(schema), OWNER, 60.0,
                     leases=lambda: [Lease(renewed, token[renewed], child, time.monotonic())],
                     loop_alive=lambda period: True, on_fence=lambda lease, why: None)
    try:
        hb.tick(hb.clock())
    finally:
        hb._session.close()
    assert hb.fenced_total == 1 and child.signals  # fenced, and noted:
    noted = client.events(renewed)[-1]
    assert (noted.event, noted.owner, noted.lease_token) == ("lease_lost", OWNER, token[renewed])
    assert noted.detail == {"reason": "renewal refused: the lease was lost"}

    async def complete() -> None:
        completer = Completer(pg_dsn, for_schema(schema), OWNER, "host", 1)
        completer.start()
        completer.submit(Completion(id=completed, token=token[completed], status="succeeded",
                                    outcome="succeeded", result="null"))
        assert await completer.drain(20)
        await completer.stop()

    asyncio.run(complete())
    assert client.get(completed).status == "leased"  # refused
    noted = client.events(completed)[-1]
    assert (noted.event, noted.owner) == ("lease_lost", OWNER)
    assert noted.detail == {"reason": "outcome refused: the lease was lost"}


def test_sql_of_ones_own_names_its_actor_and_a_producer_s_insert_is_recorded(
        conn, db, schema, producer, producer_dsn):
    """Any SQL is an entry point: the enqueue function, an operator's own UPDATE with
    jobrun.actor set in its transaction, and a producer's plain insert (the triggers run with
    their owner's rights, so a producer needs no grant on the log to write it, and reads it)."""
    s = f'"{schema}"'
    made = conn.execute(f"SELECT id FROM {s}.enqueue('t', '1')").fetchone()["id"]
    with conn.transaction():
        conn.execute("SELECT set_config('jobrun.actor', 'ops:night-shift', true)")
        conn.execute(f"UPDATE {s}.jobs SET priority = 9, version = version + 1 WHERE id = %s",
                     [made])
    [changed] = db.rows("SELECT kind, actor FROM {s}.job_events WHERE job_id = %s"
                        " AND kind <> 'enqueued'", (made,))
    assert changed == {"kind": "changed", "actor": "ops:night-shift"}
    row = producer.execute(f"INSERT INTO {s}.jobs (queue, task) VALUES ('default', 't')"
                           " RETURNING id").fetchone()
    [mine] = producer.execute(f"SELECT kind, actor FROM {s}.job_events WHERE job_id = %s",
                              [row["id"]]).fetchall()
    assert mine["kind"] == "enqueued" and mine["actor"] == producer.info.user


def test_mode_none_switches_the_recording_triggers_off_and_another_mode_on(conn, schema):
    """In mode none a statement on jobs copies no row into transition tables: the triggers that
    would are disabled, not only quiet (deleting still takes a job's events with it)."""
    def enabled() -> dict[str, str]:
        rows = conn.execute("SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid = %s::regclass"
                            " AND tgname LIKE 'jobs_events_%%'", [f'"{schema}".jobs']).fetchall()
        return {r["tgname"]: r["tgenabled"] for r in rows}

    q = for_schema(schema)
    assert set(enabled().values()) == {"O"}
    conn.execute(q.set_events_mode, {"level": events.level("none")})
    assert enabled() == {"jobs_events_insert": "D", "jobs_events_update": "D",
                         "jobs_events_delete": "O"}
    conn.execute(q.set_events_mode, {"level": events.level("terminal")})
    assert set(enabled().values()) == {"O"}
