"""Schedules against a real PostgreSQL: definitions through Client, SQL and CLI; the leader's
fire path (catch-up policies, the stale-leader guard) driven one pass at a time."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

import jobrun
from jobrun.errors import Conflict, InvalidInput, NotFound, Refused, UnknownQueue
from jobrun.sql import for_schema
from jobrun.worker.leader import Elector
from jobrun.worker.scheduler import Scheduler

UTC = timezone.utc


def count(admin_conn, schema, table="schedules", where="true"):
    q = sql.SQL("SELECT count(*) FROM {}.{} WHERE " + where).format(
        sql.Identifier(schema), sql.Identifier(table))
    return admin_conn.execute(q).fetchone()[0]


# --- definitions through the Client --------------------------------------------------------

def test_create_get_list_and_next_fire(client):
    s = client.schedules.create("nightly", "30 1 * * *", "report.build", {"full": True},
                                tz="America/New_York", catch_up="all", max_attempts=3)
    assert (s.name, s.cron, s.timezone, s.catch_up, s.status) == \
        ("nightly", "30 1 * * *", "America/New_York", "all", "active")
    assert s.next_fire_at.astimezone(jobrun_zone("America/New_York")).strftime("%H:%M") == "01:30"
    assert client.schedules.get("nightly").payload == {"full": True}
    assert [r.name for r in client.schedules.list()] == ["nightly"]
    with pytest.raises(Conflict, match="already exists"):
        client.schedules.create("nightly", "* * * * *", "x")


def jobrun_zone(name):
    from zoneinfo import ZoneInfo
    return ZoneInfo(name)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"cron": "61 * * * *"}, InvalidInput, "invalid cron expression"),
    ({"cron": "* * *"}, InvalidInput, "has 3 fields"),
    ({"tz": "Mars/Olympus"}, InvalidInput, "unknown time zone"),
    ({"starts_at": "2031-01-02T00:00:00Z", "ends_at": "2031-01-01T00:00:00Z"}, InvalidInput,
     "ends .* before it starts"),
    ({"ends_at": "2020-01-01T00:00:00Z"}, InvalidInput, "no fire time left"),
    ({"starts_at": "2031-01-01T00:00:00"}, InvalidInput, "no UTC offset"),
    ({"catch_up": "some"}, InvalidInput, "invalid catch-up"),
    ({"queue": "nowhere"}, UnknownQueue, "not declared"),
    ({"task": "bad task"}, InvalidInput, "invalid task name"),
    ({"name": "bad name"}, InvalidInput, "invalid schedule name"),
    ({"cron": "0 0 30 2 *"}, InvalidInput, "no fire time left"),
])
def test_bad_definitions_are_refused_and_store_nothing(client, admin_conn, schema, kwargs,
                                                       error, message):
    args = {"name": "s", "cron": "* * * * *", "task": "t.run", **kwargs}
    with pytest.raises(error, match=message):
        client.schedules.create(args.pop("name"), args.pop("cron"), args.pop("task"), **args)
    assert count(admin_conn, schema) == 0


def test_update_recomputes_the_next_fire_only_when_timing_changes(client):
    s = client.schedules.create("s", "0 * * * *", "t.run")
    u = client.schedules.update("s", priority=5, payload={"a": 1})
    assert (u.priority, u.payload, u.next_fire_at, u.version) == (5, {"a": 1}, s.next_fire_at, 2)
    u = client.schedules.update("s", cron="*/10 * * * * *")
    assert u.next_fire_at - datetime.now(UTC) < timedelta(seconds=11)
    with pytest.raises(InvalidInput, match="unknown time zone"):
        client.schedules.update("s", tz="Nowhere/Here")
    with pytest.raises(NotFound):
        client.schedules.update("missing", priority=1)
    assert client.schedules.get("s").timezone == "UTC"


def test_pause_resume_and_delete(client, admin_conn, schema):
    client.schedules.create("s", "* * * * * *", "t.run")
    assert client.schedules.pause("s").status == "paused"
    # Resuming starts from the next slot after now, whatever was missed while paused.
    admin_conn.execute(sql.SQL("UPDATE {}.schedules SET next_fire_at = now() - interval '1 hour'")
                       .format(sql.Identifier(schema)))
    r = client.schedules.resume("s")
    assert r.status == "active" and r.next_fire_at > datetime.now(UTC) - timedelta(seconds=1)
    client.schedules.delete("s")
    with pytest.raises(NotFound):
        client.schedules.get("s")


def test_declared_schedules_sync_and_resist_delete(client):
    app = jobrun.App()

    @app.periodic("*/5 * * * *", tz="Europe/London")
    @app.task("report.build")
    def build(job):
        pass

    assert client.schedules.sync_declared(app.declared_schedules()) == ["report.build"]
    assert client.schedules.sync_declared(app.declared_schedules()) == []  # unchanged: no write
    s = client.schedules.get("report.build")
    assert s.declared and s.timezone == "Europe/London"
    with pytest.raises(Refused, match="declared in code"):
        client.schedules.delete("report.build")
    assert client.schedules.delete("report.build", force=True).name == "report.build"


def test_periodic_checks_at_import_time():
    app = jobrun.App()
    with pytest.raises(InvalidInput, match="unknown time zone"):
        app.periodic("* * * * *", tz="Mars/X")
    with pytest.raises(InvalidInput, match="invalid cron"):
        app.periodic("99 * * * *")


def test_async_client_drives_the_same_operations(pg_dsn, schema):
    async def go():
        async with jobrun.AsyncClient(pg_dsn, schema=schema) as c:
            await c.schedules.create("a", "@hourly", "t.run")
            return [s.name for s in await c.schedules.list()]

    assert asyncio.run(go()) == ["a"]


def test_sql_constraints_refuse_bad_rows(admin_conn, schema):
    table = sql.SQL("INSERT INTO {}.schedules (name, cron, task, catch_up, starts_at, ends_at)"
                    " VALUES (%s, '* * * * *', 't', %s, %s, %s)").format(sql.Identifier(schema))
    now = datetime.now(UTC)
    for values, constraint in [(("s", "sometimes", None, None), "catch_up_valid"),
                               (("s", "latest", now, now - timedelta(1)), "window_ordered"),
                               (("bad name", "latest", None, None), "schedule_name_valid")]:
        with pytest.raises(psycopg.errors.CheckViolation, match=constraint):
            admin_conn.execute(table, values)
    assert count(admin_conn, schema) == 0


# --- the CLI -------------------------------------------------------------------------------

def cli(env, *args):
    return subprocess.run([sys.executable, "-m", "jobrun.admin.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_create_get_update_pause_delete_and_errors(db_env):
    r = cli(db_env, "schedule", "create", "tick", "--cron", "*/15 * * * *", "--task", "t.run",
            "--payload", '{"x": 1}', "--tz", "Europe/London", "--catch-up", "none")
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["status"] == "active" and made["payload"] == {"x": 1}
    r = cli(db_env, "schedule", "get", "tick", "--json")
    assert json.loads(r.stdout)["runs"] == []
    r = cli(db_env, "schedule", "update", "tick", "--priority", "7")
    assert json.loads(r.stdout)["priority"] == 7
    assert json.loads(cli(db_env, "schedule", "pause", "tick").stdout)["status"] == "paused"
    assert json.loads(cli(db_env, "schedule", "resume", "tick").stdout)["status"] == "active"
    listed = json.loads(cli(db_env, "schedule", "list", "--json").stdout)
    assert [s["name"] for s in listed] == ["tick"]
    assert "tick" in cli(db_env, "schedule", "list").stdout
    for args, message in [
        (("create", "x", "--cron", "* * * 13 *", "--task", "t"), "invalid cron expression"),
        (("create", "x", "--cron", "* * * * *", "--task", "t", "--tz", "Nowhere/X"), "unknown time zone"),
        (("create", "x", "--cron", "* * * * *", "--task", "t", "--starts-at", "2031-01-02T00:00Z",
          "--ends-at", "2031-01-01T00:00Z"), "before it starts"),
        (("create", "tick", "--cron", "* * * * *", "--task", "t"), "already exists"),
        (("update", "tick", "--cron", "nope"), "has 1 fields"),
        (("get", "missing"), "no schedule named"),
        (("next", "* * * * *", "--count", "0"), "--count"),
    ]:
        r = cli(db_env, "schedule", *args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and message in lines[0], r.stderr
    assert json.loads(cli(db_env, "schedule", "delete", "tick").stdout)["deleted"] is True


def test_cli_next_is_a_dry_run(db_env):
    r = cli(db_env, "schedule", "next", "30 1 * * *", "--tz", "America/New_York",
            "--after", "2027-11-06T00:00:00Z", "--count", "3", "--json")
    assert json.loads(r.stdout) == ["2027-11-06T05:30:00Z", "2027-11-07T05:30:00Z",
                                    "2027-11-08T06:30:00Z"]


# --- the leader's fire path ----------------------------------------------------------------

def one_pass(pg_dsn, schema, owner="m1", ttl=30.0, metrics=None):
    """One scheduler pass (elect, sync, fire what is due) on a fresh connection."""
    async def go():
        leader = Elector(pg_dsn, for_schema(schema), owner, ttl=ttl, metrics=metrics)
        s = Scheduler(pg_dsn, for_schema(schema), leader, metrics=metrics)
        conn = await s._session.get()
        try:
            await leader.elect(conn)
            await s.step()
            return leader.leading
        finally:
            await s._session.close()

    return asyncio.run(go())


def outage(admin_conn, schema, name, minutes):
    """Pretend the scheduler was down: the schedule's first unfired slot is long past."""
    admin_conn.execute(sql.SQL(
        "UPDATE {}.schedules SET next_fire_at = date_trunc('minute', now()) - make_interval(mins => %s)"
        " WHERE name = %s").format(sql.Identifier(schema)), [minutes, name])


@pytest.mark.parametrize("policy, expected", [("latest", 1), ("all", 11), ("none", 0)])
def test_catch_up_after_an_outage_follows_the_policy(client, pg_dsn, schema, admin_conn,
                                                     policy, expected):
    s = client.schedules.create("m", "* * * * *", "t.run", catch_up=policy)
    outage(admin_conn, schema, "m", 10)
    assert one_pass(pg_dsn, schema)
    jobs = client.schedules.jobs("m")
    # "none" may still fire the current minute's slot if it is only seconds old.
    now = datetime.now(UTC)
    on_time = policy == "none" and now.second < 5
    assert len(jobs) == expected + (1 if on_time else 0)
    assert all(j.schedule_id == s.id and j.idempotency_key.startswith(f"sched:{s.id}:")
               for j in jobs)
    after = client.schedules.get("m")
    assert after.next_fire_at > now - timedelta(seconds=1)
    # A second pass fires nothing already decided (only a slot that came due since, if any).
    one_pass(pg_dsn, schema)
    again = {j.idempotency_key for j in client.schedules.jobs("m")} - {j.idempotency_key for j in jobs}
    assert all(k.endswith(after.next_fire_at.strftime("%Y-%m-%dT%H:%M:%SZ")) for k in again)


def test_list_by_schedule_on_the_cli(client, pg_dsn, schema, admin_conn, db_env):
    client.schedules.create("m", "* * * * *", "t.run")
    outage(admin_conn, schema, "m", 2)
    one_pass(pg_dsn, schema)
    r = cli(db_env, "list", "--schedule", "m", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)) == 1
    runs = json.loads(cli(db_env, "schedule", "get", "m").stdout)["runs"]
    assert len(runs) == 1 and runs[0]["status"] == "queued"


def test_a_paused_schedule_fires_nothing(client, pg_dsn, schema, admin_conn):
    client.schedules.create("m", "* * * * *", "t.run")
    outage(admin_conn, schema, "m", 3)
    client.schedules.pause("m")
    one_pass(pg_dsn, schema)
    assert client.schedules.jobs("m") == []


def test_a_stale_leaders_fire_changes_nothing(client, pg_dsn, schema, admin_conn):
    s = client.schedules.create("m", "* * * * *", "t.run")
    outage(admin_conn, schema, "m", 1)
    assert one_pass(pg_dsn, schema, owner="old")  # "old" leads (and fires the due slot)
    outage(admin_conn, schema, "m", 1)
    q = for_schema(schema)
    row = admin_conn.execute(sql.SQL("SELECT next_fire_at, version FROM {}.schedules")
                             .format(sql.Identifier(schema))).fetchone()
    # "new" takes over after the old lease expired; the old leader still believes it leads.
    admin_conn.execute(sql.SQL("UPDATE {}.scheduler_leader SET expires_at = now() - interval '1s'")
                       .format(sql.Identifier(schema)))
    assert one_pass(pg_dsn, schema, owner="new")
    fired = len(client.schedules.jobs("m"))
    outage(admin_conn, schema, "m", 5)
    before = client.schedules.get("m")
    params = {"owner": "old", "term": 1, "id": s.id, "version": before.version,
              "expected": before.next_fire_at, "next_fire_at": datetime.now(UTC) + timedelta(hours=1),
              "last_fire_at": before.next_fire_at, "slots": [before.next_fire_at]}
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        result = conn.execute(q.schedule_fire, params).fetchone()
    assert result[0] == 0 and result[1] == []
    after = client.schedules.get("m")
    assert (after.next_fire_at, after.last_fire_at) == (before.next_fire_at, before.last_fire_at)
    assert len(client.schedules.jobs("m")) == fired
    # The same statement with the current lease does fire: the guard, not the data, refused.
    term = admin_conn.execute(sql.SQL("SELECT term FROM {}.scheduler_leader")
                              .format(sql.Identifier(schema))).fetchone()[0]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        result = conn.execute(q.schedule_fire, {**params, "owner": "new", "term": term}).fetchone()
    assert result[0] == 1 and len(result[1]) == 1
    assert row is not None


def test_leadership_is_exclusive_until_the_lease_expires(client, pg_dsn, schema, admin_conn):
    assert one_pass(pg_dsn, schema, owner="a")
    assert not one_pass(pg_dsn, schema, owner="b")
    admin_conn.execute(sql.SQL("UPDATE {}.scheduler_leader SET expires_at = now() - interval '1s'")
                       .format(sql.Identifier(schema)))
    assert one_pass(pg_dsn, schema, owner="b")
    assert not one_pass(pg_dsn, schema, owner="a")
    term = admin_conn.execute(sql.SQL("SELECT owner, term FROM {}.scheduler_leader")
                              .format(sql.Identifier(schema))).fetchone()
    assert term == ("b", 2)


def test_top_shows_schedules_with_last_and_next_fire(client, pg_dsn, schema, admin_conn, db_env):
    client.schedules.create("m", "* * * * *", "t.run")
    client.schedules.create("later", "@yearly", "t.run")
    outage(admin_conn, schema, "m", 1)
    one_pass(pg_dsn, schema)
    r = cli(db_env, "top", "--once")
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if l.strip().startswith(("m ", "later "))]
    assert len(lines) == 2 and " ago" in lines[0] and " in " in lines[0], r.stdout
    assert "-" in lines[1].split()[-3:]


def test_metrics_count_fires_catch_up_skips_and_leader_changes(client, pg_dsn, schema, admin_conn):
    from jobrun.worker.metrics import Metrics

    m = Metrics()
    client.schedules.create("all", "* * * * *", "t.run", catch_up="all")
    client.schedules.create("latest", "* * * * *", "t.run")
    outage(admin_conn, schema, "all", 3)
    outage(admin_conn, schema, "latest", 3)
    one_pass(pg_dsn, schema, metrics=m)
    value = lambda name: m.registry.get_sample_value(name)  # noqa: E731
    assert value("jobrun_scheduler_leader_changes_total") == 1
    assert value("jobrun_schedule_fires_total") == 5          # 4 slots + 1 (latest)
    assert value("jobrun_schedule_skipped_total") == 3        # latest skipped 3 older slots
    assert value("jobrun_schedule_catch_up_fires_total") >= 3  # slots older than ON_TIME
    assert value("jobrun_schedule_fire_lag_seconds_count") == 5


def test_a_row_written_past_the_checks_expires_without_stopping_the_others(client, pg_dsn,
                                                                            schema, admin_conn):
    client.schedules.create("good", "* * * * *", "t.run")
    admin_conn.execute(sql.SQL(
        "INSERT INTO {}.schedules (name, cron, task, next_fire_at)"
        " VALUES ('bad', '99 * * * *', 't.run', now() - interval '2 minutes')")
        .format(sql.Identifier(schema)))
    outage(admin_conn, schema, "good", 1)
    assert one_pass(pg_dsn, schema)
    assert client.schedules.get("bad").status == "expired"
    assert len(client.schedules.jobs("good")) == 1


def test_a_new_schedule_wakes_the_sleeping_leader(pg_dsn, schema):
    """With a 30 s poll, only the NOTIFY of the change can make the first slot on time."""
    async def until(predicate, timeout):
        deadline = asyncio.get_running_loop().time() + timeout
        while not (value := await predicate()):
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.02)
        return value

    async def go():
        leader = Elector(pg_dsn, for_schema(schema), "m", ttl=60.0)
        s = Scheduler(pg_dsn, for_schema(schema), leader, poll=30.0)
        leader.start()
        s.start()
        try:
            async with jobrun.AsyncClient(pg_dsn, schema=schema) as c:
                async def leading():
                    return leader.leading
                await until(leading, 10)  # then it sleeps ~20 s: nothing is scheduled
                made = await c.schedules.create("fresh", "*/2 * * * * *", "t.run")
                jobs = await until(lambda: c.schedules.jobs("fresh"), 10)
                return made, jobs[-1]
        finally:
            await s.stop()
            await leader.stop()

    made, job = asyncio.run(go())
    assert job.idempotency_key == f"sched:{made.id}:" + made.next_fire_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert (job.created_at - made.next_fire_at).total_seconds() < 0.3
