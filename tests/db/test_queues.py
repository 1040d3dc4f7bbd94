"""Queues as objects through the Client (jobrun/queues.py) against a real PostgreSQL: create,
update with version guards, get/list with live counts, delete, pause/resume, retention."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg import sql

import jobrun
from jobrun.errors import Conflict, InvalidInput, NotFound, Refused, StaleVersion
from jobrun.worker.claimer import claim_params


def execute(pg_dsn, query):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(query)


def test_add_with_settings_reads_back_in_seconds(client):
    queue, created = client.queue_add("emails", concurrency=4, rate="50/s", aging="30s",
                                      priority_default=-5, max_attempts=3, retention="2d",
                                      key_concurrency=2)
    assert created
    assert {k: queue[k] for k in ("name", "concurrency", "rate_limit", "rate_period", "aging",
                                  "priority_default", "max_attempts", "retention",
                                  "key_concurrency", "paused", "queued", "leased")} == {
        "name": "emails", "concurrency": 4, "rate_limit": 50, "rate_period": 1.0,
        "aging": 30.0, "priority_default": -5, "max_attempts": 3, "retention": 172800.0,
        "key_concurrency": 2, "paused": False, "queued": 0, "leased": 0}
    assert client.queue_get("emails") == queue
    # a replay with the same settings is not an error; other settings are a conflict
    assert client.queue_add("emails", aging=30) == (queue, False)
    with pytest.raises(Conflict, match="exists with another aging"):
        client.queue_add("emails", aging="1m")
    assert client.declare_queue("emails") == queue  # the old idempotent declare


def test_update_bumps_version_and_is_guarded(client):
    queue, _ = client.queue_add("bulk")
    v0 = queue["version"]
    changed = client.queue_update("bulk", aging="20ms", rate="5/2s", if_version=v0)
    assert (changed["aging"], changed["rate_limit"], changed["rate_period"]) == (0.02, 5, 2.0)
    assert changed["version"] == v0 + 1 and changed["updated_at"] > queue["updated_at"]
    with pytest.raises(StaleVersion, match=f"at version {v0 + 1}, not {v0}") as err:
        client.queue_update("bulk", aging=None, if_version=v0)
    assert err.value.current["aging"] == 0.02  # nothing changed
    cleared = client.queue_update("bulk", aging=None, rate=None)
    assert (cleared["aging"], cleared["rate_limit"], cleared["version"]) == (None, None, v0 + 2)


@pytest.mark.parametrize("settings, message", [
    ({"aging": "0s"}, "invalid aging"), ({"rate": "5/x"}, "invalid rate"),
    ({"concurrency": -1}, "invalid concurrency"), ({}, "nothing to change"),
    ({"priority_default": 500}, "invalid priority"), ({"bogus": 1}, "unknown queue setting"),
])
def test_bad_settings_change_nothing(client, settings, message):
    before, _ = client.queue_add("q1", aging="1m")
    with pytest.raises(InvalidInput, match=message):
        client.queue_update("q1", **settings)
    assert client.queue_get("q1") == before
    with pytest.raises(InvalidInput):
        client.queue_add("q2", **(settings or {"aging": "-1s"}))
    assert [q["name"] for q in client.queue_list()] == ["default", "q1"]


def test_the_database_refuses_what_the_client_refuses(pg_dsn, schema):
    with pytest.raises(psycopg.errors.CheckViolation):
        execute(pg_dsn, sql.SQL("UPDATE {} SET aging = interval '0'").format(
            sql.Identifier(schema, "queues")))


def test_list_counts_runnable_scheduled_and_leased(client):
    client.queue_add("emails")
    for i in range(3):
        client.enqueue("t", i, queue="emails")
    client.enqueue("t", queue="emails", delay="1h")
    with client._connection() as conn:  # lease one
        conn.execute(client.queries.claim_jobs, claim_params(["emails"], 1, "o", 30))
    got = {q["name"]: (q["queued"], q["scheduled"], q["leased"]) for q in client.queue_list()}
    assert got == {"default": (0, 0, 0), "emails": (2, 1, 1)}


def test_delete_is_refused_while_jobs_wait_and_forced_deletes_them(client):
    client.queue_add("gone")
    job = client.enqueue("t", queue="gone").job
    with pytest.raises(Refused, match="holds 1 queued and 0 leased"):
        client.queue_delete("gone")
    assert client.get(job.id).status == "queued"
    out = client.queue_delete("gone", force=True)
    assert out["name"] == "gone" and out["deleted_jobs"] == 1
    with pytest.raises(NotFound):
        client.get(job.id)
    with pytest.raises(NotFound):
        client.queue_get("gone")
    with pytest.raises(NotFound):
        client.queue_delete("gone")
    with pytest.raises(Refused, match="cannot be deleted"):
        client.queue_delete("default", force=True)


def test_delete_takes_finished_jobs_and_is_refused_by_a_schedule(client):
    client.queue_add("done")
    job = client.enqueue("t", queue="done").job
    client.cancel(job.id)
    client.schedules.create("nightly", "0 3 * * *", "t", queue="done")
    with pytest.raises(Refused, match="schedule"):
        client.queue_delete("done", force=True)
    client.schedules.delete("nightly")
    assert client.queue_delete("done")["deleted_jobs"] == 1
    with pytest.raises(NotFound):
        client.get(job.id)


def test_pause_and_resume_are_changes(client):
    v = client.queue_get("default")["version"]
    assert client.pause_queue("default")["paused"] is True
    resumed = client.resume_queue("default")
    assert resumed["paused"] is False and resumed["version"] == v + 2


def test_async_client_runs_the_same_operations(pg_dsn, schema):
    async def go():
        async with jobrun.AsyncClient(pg_dsn, schema=schema) as c:
            made, created = await c.queue_add("a1", aging="5m")
            changed = await c.queue_update("a1", if_version=made["version"], retention="1d")
            listed = await c.queue_list()
            await c.queue_delete("a1")
            return created, changed, [q["name"] for q in listed]

    created, changed, names = asyncio.run(go())
    assert created and changed["retention"] == 86400.0 and names == ["a1", "default"]


def test_purge_honours_each_queues_retention(client, pg_dsn, schema):
    client.queue_add("short", retention="1h")
    client.queue_add("long", retention="30d")
    ids = {}
    for queue in ("short", "long", "default"):
        job = client.enqueue("t", queue=queue).job
        client.cancel(job.id)
        ids[queue] = job.id
    execute(pg_dsn, sql.SQL("UPDATE {} SET finished_at = now() - interval '2 days'").format(
        sql.Identifier(schema, "jobs")))
    # the default (7d) keeps the default queue's job; 'short' (1h) goes, 'long' (30d) stays
    assert client.purge("7d") == 1
    with pytest.raises(NotFound):
        client.get(ids["short"])
    assert client.get(ids["long"]) and client.get(ids["default"])
    # an explicit --older-than is the default for queues without a retention of their own
    assert client.purge("1d") == 1
    assert client.get(ids["long"]).id == ids["long"]
    assert client.purge(None) == 0
