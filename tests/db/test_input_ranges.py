"""Values out of range through the Client, the `jobrun` CLI and the scheduler: integers past
PostgreSQL's bigint and integer, times at the ends of the calendar, names that are not time
zones, bytes that are not UTF-8. Each is one clear line (InvalidInput, `jobrun: error:`),
never a database error or a traceback, and nothing is stored or changed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from psycopg import sql

import jobrun
from jobrun.errors import InvalidInput
from tests.cliproc import fails, ok, ok_json
from tests.db.test_schedules import one_pass

BIG = 2**63  # one past bigint
NOT_UTF8 = os.fsdecode(b"x\xffy")  # how sys.argv holds the bytes x, 0xff, y


def jobs_table(admin_conn, schema, what="count(*)"):
    return admin_conn.execute(sql.SQL(f"SELECT {what} FROM {{}}.jobs").format(
        sql.Identifier(schema))).fetchall()


def schedules_count(admin_conn, schema):
    return admin_conn.execute(sql.SQL("SELECT count(*) FROM {}.schedules").format(
        sql.Identifier(schema))).fetchone()[0]


# --- integers past bigint -------------------------------------------------------------------

@pytest.mark.parametrize("version", [BIG, 10**30, -1, -BIG - 1])
def test_a_version_out_of_range_is_refused_naming_it(client, admin_conn, schema, version):
    job = client.enqueue("t", 1).job
    client.declare_queue("q")
    calls = [lambda: client.cancel(job.id, if_version=version),
             lambda: client.retry(job.id, if_version=version),
             lambda: client.delete(job.id, if_version=version),
             lambda: client.queue_update("q", if_version=version, concurrency=2)]
    for call in calls:
        with pytest.raises(InvalidInput, match=rf"^invalid version {version}: an integer from 0"
                                               rf" to {BIG - 1}$"):
            call()
    assert jobs_table(admin_conn, schema, "status, version") == [("queued", 0)]
    assert client.queue_get("q")["concurrency"] is None and client.queue_get("q")["version"] == 0


def test_ids_limits_cursors_and_ages_out_of_range_are_refused(client):
    job = client.enqueue("t", 1).job
    client.schedules.create("s", "@daily", "t")
    refused = {
        "invalid job id": [lambda: client.get(BIG), lambda: client.attempts(BIG),
                           lambda: client.cancel(BIG), lambda: client.retry(-BIG - 1),
                           lambda: client.delete(0)],
        "invalid before": [lambda: client.list(before=BIG),
                           lambda: client.schedules.jobs("s", before=BIG)],
        "invalid limit": [lambda: client.list(limit=BIG),
                          lambda: client.schedules.runs("s", limit=BIG),
                          lambda: client.schedules.runs("s", limit=-1),
                          lambda: client.schedules.jobs("s", limit=BIG)],
    }
    for message, calls in refused.items():
        for call in calls:
            with pytest.raises(InvalidInput, match=f"^{message} "):
                call()
    for older in ("1e300", "1e12", 1e18, "5300w"):
        with pytest.raises(InvalidInput, match="^invalid older_than .*: at most 100 years$"):
            client.purge(older)
    assert client.get(job.id).status == "queued"
    assert client.schedules.runs("s", limit=0) == []  # zero runs: allowed, as before


def test_the_async_client_refuses_the_same(pg_dsn, schema):
    async def go():
        async with jobrun.AsyncClient(pg_dsn, schema=schema) as c:
            job = (await c.enqueue("t")).job
            with pytest.raises(InvalidInput, match="^invalid version"):
                await c.cancel(job.id, if_version=BIG)
            return (await c.get(job.id)).status

    assert asyncio.run(go()) == "queued"


def test_cli_says_which_integer_is_out_of_range(cli, client, admin_conn, schema):
    job = client.enqueue("t", 1).job
    client.declare_queue("q")
    for args, message in [
        (("cancel", str(job.id), "--if-version", str(BIG)), f"invalid version {BIG}"),
        (("retry", str(job.id), "--if-version", str(BIG)), f"invalid version {BIG}"),
        (("delete", str(job.id), "--if-version", str(BIG)), f"invalid version {BIG}"),
        (("queue", "update", "q", "--concurrency", "2", "--if-version", str(BIG)),
         f"invalid version {BIG}"),
        (("get", str(BIG)), f"invalid job id {BIG}"),
        (("logs", str(BIG)), f"invalid job id {BIG}"),
        (("logs", str(job.id), "--attempt", str(2**31)), f"invalid attempt {2**31}"),
        (("list", "--before", str(BIG)), f"invalid before {BIG}"),
        (("purge", "--older-than", "1e12"), "invalid older_than '1e12': at most 100 years"),
    ]:
        line = fails(cli(*args))
        assert message in line and "database" not in line, line
    assert jobs_table(admin_conn, schema, "status, version") == [("queued", 0)]


# --- the ends of the calendar ---------------------------------------------------------------

def test_a_schedule_with_no_fire_time_in_range_is_refused(client, admin_conn, schema):
    for starts in ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc)):
        with pytest.raises(InvalidInput, match="has no fire time left in range"):
            client.schedules.create("s", "0 0 * * *", "t", starts_at=starts)
    client.schedules.create("s", "0 0 * * *", "t")
    with pytest.raises(InvalidInput, match="has no fire time left in range"):
        client.schedules.update("s", starts_at="9999-12-31T23:59:59-05:00")
    early = client.schedules.update("s", starts_at="0001-01-01T00:00:00Z")
    assert early.next_fire_at > datetime.now(timezone.utc)  # a start in the past: from now
    assert schedules_count(admin_conn, schema) == 1


def test_cli_schedule_create_and_next_at_the_ends(cli, admin_conn, schema):
    line = fails(cli("schedule", "create", "s", "--cron", "0 0 * * *", "--task", "t",
                     "--starts-at", "9999-12-31T23:59:59Z"))
    assert "no fire time left in range" in line
    assert schedules_count(admin_conn, schema) == 0
    for after in ("9999-12-31T23:59:00Z", "9999-12-31T23:59:59-12:00"):
        line = fails(cli("schedule", "next", "0 0 * * *", "--after", after))
        assert "no fire time left in range" in line
    first = ok_json(cli("schedule", "next", "0 0 * * *", "--after", "0001-01-01T00:00:00Z",
                        "--count", "2", "--json"))
    assert first == ["0001-01-03T00:00:00Z", "0001-01-04T00:00:00Z"]


def test_the_scheduler_survives_rows_written_past_the_checks(client, pg_dsn, schema,
                                                              admin_conn):
    """A zone that is no longer accepted, a first slot in year 1: the leader's pass goes on,
    the good schedule fires, the bad zone's schedule expires (an error in the log)."""
    client.schedules.create("good", "* * * * *", "t.run")
    table = sql.Identifier(schema)
    admin_conn.execute(sql.SQL(
        "INSERT INTO {}.schedules (name, cron, task, timezone, next_fire_at) VALUES"
        " ('zone', '* * * * *', 't.run', 'localtime', now() - interval '2 minutes'),"
        " ('ancient', '0 0 * * *', 't.run', 'UTC', '0001-01-01 00:00:00+00')").format(table))
    admin_conn.execute(sql.SQL("UPDATE {}.schedules SET next_fire_at = now() - interval"
                               " '1 minute' WHERE name = 'good'").format(table))
    assert one_pass(pg_dsn, schema)
    assert client.schedules.get("zone").status == "expired"
    assert client.schedules.get("ancient").next_fire_at > datetime.now(timezone.utc)
    assert len(client.schedules.jobs("ancient")) == 1  # catch-up "latest": one job
    assert len(client.schedules.jobs("good")) == 1
    listed = {s.name: s for s in client.schedules.list()}
    assert listed["zone"].upcoming(5) == []


# --- time zone names ------------------------------------------------------------------------

@pytest.mark.parametrize("tz, message", [
    ("localtime", "time zone 'localtime' is not a zone name (the host's own zone"),
    ("posixrules", "time zone 'posixrules' is not a zone name"),
    ("Factory", "time zone 'Factory' is not a zone name"),
    ("", "unknown time zone '': use an IANA name such as Europe/London"),
    ("europe/paris", "unknown time zone 'europe/paris': did you mean Europe/Paris?"),
])
def test_only_iana_zone_names_are_taken(client, cli, admin_conn, schema, tz, message):
    with pytest.raises(InvalidInput, match="^" + message.replace("(", r"\(").replace("?", r"\?")):
        client.schedules.create("s", "@daily", "t", tz=tz)
    assert message in fails(cli("schedule", "create", "s", "--cron", "@daily", "--task", "t",
                                "--tz", tz))
    assert message in fails(cli("schedule", "next", "@daily", "--tz", tz))
    assert schedules_count(admin_conn, schema) == 0
    client.schedules.create("s", "@daily", "t", tz="Europe/Paris")
    with pytest.raises(InvalidInput, match="time zone"):
        client.schedules.update("s", tz=tz)
    assert client.schedules.get("s").timezone == "Europe/Paris"


# --- bytes that are not UTF-8 ---------------------------------------------------------------

def test_cli_refuses_an_argument_that_is_not_utf8(cli, admin_conn, schema):
    payload = os.fsdecode(b'{"a": "\xff"}')
    line = fails(cli("enqueue", "noop", payload))
    assert line == "jobrun: error: argument 3 ('{\"a\": \"\\xff\"}') is not valid UTF-8"
    line = fails(cli("--dsn", os.fsdecode(b"postgresql://u:S3cret\xff@localhost/x"), "enqueue",
                     "noop"))
    assert line == "jobrun: error: the value of --dsn is not valid UTF-8"
    assert "argument 3 ('x\\xffy') is not valid UTF-8" in fails(cli("queue", "add", NOT_UTF8))
    assert jobs_table(admin_conn, schema) == [(0,)]
    assert ok(cli("list", "--json")).strip() == "[]"


def test_the_master_refuses_an_argument_that_is_not_utf8(env):
    environ, cwd = env
    done = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "-A", NOT_UTF8],
                          env=environ, cwd=cwd, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (
        2, "jobrun-master: error: argument 2 ('x\\xffy') is not valid UTF-8\n")
