"""The `jobrun` command line, run as a real subprocess against a real PostgreSQL.

Each test gets its own migrated schema (the ``db_env`` fixture); fixtures are set up through
the Python client or plain SQL, and every assertion reads parsed output or the database.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from jobrun.sql import migrations

from tests.cliproc import fails, ok, ok_json, run


@pytest.fixture
def count(admin_conn, schema):
    def count_jobs(where: str = "true") -> int:
        query = sql.SQL("SELECT count(*) FROM {}.jobs WHERE " + where).format(
            sql.Identifier(schema))
        return admin_conn.execute(query).fetchone()[0]
    return count_jobs


# --- enqueue and get ----------------------------------------------------------------------

def test_enqueue_get_round_trip(cli, execute):
    payload = {"to": "a@b.c", "n": [1, 2.5, None], "ü": "ß"}
    job = ok_json(cli("enqueue", "email.send", json.dumps(payload), "--priority", "5",
                      "--max-attempts", "3", "--key", "k1"))
    assert job["created"] is True
    assert (job["task"], job["queue"], job["status"]) == ("email.send", "default", "queued")
    assert (job["priority"], job["max_attempts"], job["idempotency_key"]) == (5, 3, "k1")
    assert job["payload"] == payload
    assert datetime.fromisoformat(job["run_at"]).tzinfo is not None
    stored = execute("SELECT task, payload, priority FROM {s}.jobs WHERE id = %s",
                     [job["id"]]).fetchone()
    assert stored == ("email.send", payload, 5)

    got = ok_json(cli("get", str(job["id"])))
    assert got["id"] == job["id"] and got["payload"] == payload and "history" not in got
    assert got["run_at"] == job["run_at"]
    with_attempts = ok_json(cli("get", str(job["id"]), "--attempts"))
    assert with_attempts["history"] == []


def test_enqueue_without_payload_and_from_stdin(cli):
    assert ok_json(cli("enqueue", "t.none"))["payload"] is None
    job = ok_json(cli("enqueue", "t.stdin", "-", input='{"from": "stdin"}\n'))
    assert job["payload"] == {"from": "stdin"}


def test_enqueue_delay_and_run_at(cli):
    delayed = ok_json(cli("enqueue", "t", "--delay", "1h"))
    created = datetime.fromisoformat(delayed["created_at"])
    assert datetime.fromisoformat(delayed["run_at"]) - created >= timedelta(minutes=59)
    at = ok_json(cli("enqueue", "t", "--run-at", "2030-01-31T09:00:00+02:00"))
    assert datetime.fromisoformat(at["run_at"]) == datetime(2030, 1, 31, 7, tzinfo=timezone.utc)


def test_idempotent_replay_and_conflict(cli, count):
    first = ok_json(cli("enqueue", "t", '{"a": 1}', "--key", "once"))
    again = ok_json(cli("enqueue", "t", '{"a":1}', "--key", "once"))
    assert again["created"] is False and again["id"] == first["id"]
    line = fails(cli("enqueue", "t", '{"a": 2}', "--key", "once"))
    assert "once" in line and "already used" in line
    assert count() == 1


BAD_INPUTS = [
    (["t", "{nope"], {}, "not valid JSON"),
    (["t", "NaN"], {}, "not a JSON value"),
    (["t", '"\\u0000"'], {}, "NUL"),
    (["t", json.dumps("x" * 100)], {"JOBRUN_MAX_PAYLOAD_BYTES": "64"}, "over the limit of 64"),
    (["9bad"], {}, "invalid task name"),
    (["t", "--queue", "nope"], {}, 'queue "nope" is not declared'),
    (["t", "--queue", "bad queue"], {}, "invalid queue name"),
    (["t", "--priority", "101"], {}, "invalid priority 101"),
    (["t", "--max-attempts", "0"], {}, "invalid max_attempts 0"),
    (["t", "--run-at", "2030-01-01T09:00:00"], {}, "no UTC offset"),
    (["t", "--run-at", "tomorrow"], {}, "not an ISO 8601"),
    (["t", "--delay", "soon"], {}, "invalid duration"),
    (["t", "--delay", "1s", "--run-at", "2030-01-01T09:00:00Z"], {}, "not both"),
    (["t", "--key", ""], {}, "invalid idempotency key"),
]


@pytest.mark.parametrize("args, extra_env, message", BAD_INPUTS,
                         ids=[m for _, _, m in BAD_INPUTS])
def test_bad_input_changes_nothing(cli, env, count, args, extra_env, message):
    ok(cli("enqueue", "existing"))
    line = fails(cli("enqueue", *args, env={**env[0], **extra_env}))
    assert message in line
    assert count() == 1


def test_malformed_command_line_exits_2(cli, count):
    fails(cli("enqueue", "t", "--priority", "high"), code=2)
    fails(cli("enqueue"), code=2)
    fails(cli("frobnicate"), code=2)
    assert count() == 0


# --- list ---------------------------------------------------------------------------------

def test_list_filters_json_and_pagination(cli, client):
    client.declare_queue("emails")
    ids = [client.enqueue("a.task", i).job.id for i in range(3)]
    ids += [client.enqueue("b.task", i, queue="emails").job.id for i in range(2)]
    client.cancel(ids[1])

    def listed(*args):
        return [j["id"] for j in ok_json(cli("list", *args, "--json"))]

    assert listed() == ids[::-1]
    assert listed("--task", "b.task") == ids[4:2:-1]
    assert listed("--queue", "emails") == ids[4:2:-1]
    assert listed("--status", "cancelled") == [ids[1]]
    assert listed("--status", "queued", "--queue", "default") == [ids[2], ids[0]]
    page1 = listed("--limit", "2")
    page2 = listed("--limit", "2", "--before", str(page1[-1]))
    page3 = listed("--limit", "2", "--before", str(page2[-1]))
    assert page1 + page2 + page3 == ids[::-1] and len(page3) == 1
    full = ok_json(cli("--json", "list", "--limit", "1"))  # --json before the command
    assert full[0]["payload"] == 1 and full[0]["task"] == "b.task"

    table = ok(cli("list", "--queue", "emails"))
    rows = [line.split() for line in table.splitlines() if line.split()[:1] in ([str(ids[3])],
                                                                              [str(ids[4])])]
    assert [r[:5] for r in rows] == [[str(ids[4]), "emails", "b.task", "queued", "0/5"],
                                     [str(ids[3]), "emails", "b.task", "queued", "0/5"]]
    assert "status" in table.splitlines()[0]
    assert "no jobs" in ok(cli("list", "--task", "none.such"))
    assert "invalid status" in fails(cli("list", "--status", "bogus"))


# --- cancel, retry, purge -----------------------------------------------------------------

def test_cancel_and_retry(cli, client, count):
    job_id = client.enqueue("t", {"x": 1}).job.id
    cancelled = ok_json(cli("cancel", str(job_id)))
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"]
    assert count("status = 'cancelled'") == 1
    assert "only queued or leased" in fails(cli("cancel", str(job_id)))

    retried = ok_json(cli("retry", str(job_id)))
    assert (retried["status"], retried["attempts"], retried["finished_at"]) == ("queued", 0, None)
    assert count("status = 'queued'") == 1
    assert "only dead or cancelled" in fails(cli("retry", str(job_id)))
    assert "no job 999999" in fails(cli("get", "999999"))


def test_purge(cli, client, execute, count):
    ids = [client.enqueue("t", i).job.id for i in range(4)]
    old = datetime.now(timezone.utc) - timedelta(days=10)
    execute("UPDATE {s}.jobs SET status = 'cancelled', finished_at = %s WHERE id = %s", [old, ids[0]])
    execute("UPDATE {s}.jobs SET status = 'dead', finished_at = %s WHERE id = %s", [old, ids[1]])
    execute("UPDATE {s}.jobs SET status = 'succeeded', finished_at = now() WHERE id = %s", [ids[2]])

    assert ok_json(cli("purge", "--older-than", "7d", "--status", "dead", "--json")) == {"deleted": 1}
    assert count(f"id = {ids[1]}") == 0 and count() == 3
    assert ok(cli("purge", "--older-than", "7d")).strip() == "deleted 1 job"
    remaining = execute("SELECT id FROM {s}.jobs ORDER BY id").fetchall()
    assert [r[0] for r in remaining] == ids[2:]
    assert "cannot purge 'queued'" in fails(cli("purge", "--older-than", "1s", "--status", "queued"))
    assert "invalid duration" in fails(cli("purge", "--older-than", "a week"))
    # without --older-than only queues with a retention of their own are purged: none here
    assert ok(cli("purge")).strip() == "deleted 0 jobs"
    assert count() == 2


# --- stats and queues ---------------------------------------------------------------------

def test_stats(cli, client):
    client.declare_queue("emails")
    client.enqueue("t", 1)
    client.enqueue("t", 2)
    client.enqueue("t", 3, delay="1h")
    client.cancel(client.enqueue("t", 4, queue="emails").job.id)
    client.pause_queue("emails")
    client.enqueue("t", 5, after=[1])  # waits for the first

    rows = {r["queue"]: r for r in ok_json(cli("stats", "--json"))}
    assert set(rows) == {"default", "emails"}
    d, e = rows["default"], rows["emails"]
    assert (d["waiting"], d["queued"], d["scheduled"], d["leased"], d["cancelled"], d["paused"]) \
        == (1, 2, 1, 0, 0, False)
    assert d["oldest_queued_age"] >= 0
    assert (e["queued"], e["cancelled"], e["paused"], e["oldest_queued_age"]) == (0, 1, True, None)

    table = ok(cli("stats")).splitlines()
    assert table[0].split()[:4] == ["queue", "paused", "waiting", "queued"]
    assert [line.split()[:5] for line in table if line.split()[:1] == ["default"]] == [
        ["default", "1", "2", "1", "0"]]


def test_queue_commands(cli, client, execute):
    added = ok_json(cli("queue", "add", "emails"))
    assert added["name"] == "emails" and added["paused"] is False
    assert ok_json(cli("queue", "add", "emails"))["name"] == "emails"  # idempotent
    assert [q["name"] for q in ok_json(cli("queue", "list", "--json"))] == ["default", "emails"]
    assert "emails" in ok(cli("queue", "list"))

    assert ok_json(cli("queue", "pause", "emails"))["paused"] is True
    assert execute("SELECT paused FROM {s}.queues WHERE name = 'emails'").fetchone() == (True,)
    assert ok_json(cli("queue", "resume", "emails"))["paused"] is False
    assert execute("SELECT paused FROM {s}.queues WHERE name = 'emails'").fetchone() == (False,)

    assert "not declared" in fails(cli("queue", "pause", "nope"))
    assert "invalid queue name" in fails(cli("queue", "add", "bad name!"))
    assert ok_json(cli("enqueue", "t", "--queue", "emails"))["queue"] == "emails"


# --- connection, schema and options -------------------------------------------------------

def test_unreachable_database_names_target_without_password(cli):
    dsn = "postgresql://u:s3cretpw@127.0.0.1:1/db"
    for args in (["--dsn", dsn, "list"], ["enqueue", "t", "--dsn", dsn]):
        result = cli(*args)
        line = fails(result)
        assert "127.0.0.1:1" in line and "cannot reach PostgreSQL" in line
        assert "s3cretpw" not in result.stdout + result.stderr


def test_invalid_schema_option(cli):
    assert "invalid schema name" in fails(cli("--schema", "Bad-Name", "stats"))


def test_schema_option_after_command_wins(cli, client, env):
    client.enqueue("t", 1)
    environ, _ = env
    other = "t_" + uuid.uuid4().hex[:12]
    line = fails(cli("--schema", environ["JOBRUN_SCHEMA"], "list", "--schema", other))
    assert other in line and "jobrun migrate" in line
    assert len(ok_json(cli("--schema", other, "list", "--schema", environ["JOBRUN_SCHEMA"],
                           "--json"))) == 1


def test_migrate_new_schema_then_enqueue(cli, env, pg_dsn):
    environ, _ = env
    name = "t_" + uuid.uuid4().hex[:12]
    fresh = {**environ, "JOBRUN_SCHEMA": name}
    try:
        # An explicit URL is never migrated implicitly.
        assert "run `jobrun migrate`" in fails(cli("enqueue", "t", env=fresh))
        result = ok_json(cli("migrate", "--json", env=fresh))
        assert result["applied"] == [m.version for m in migrations()] and result["schema"] == name
        again = ok(cli("migrate", env=fresh))
        assert "already current" in again and name in again
        assert ok_json(cli("enqueue", "t", '{"k": 1}', env=fresh))["created"] is True
        with psycopg.connect(pg_dsn) as conn:
            query = sql.SQL("SELECT payload FROM {}.jobs").format(sql.Identifier(name))
            assert conn.execute(query).fetchall() == [({"k": 1},)]
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def test_embedded_zero_setup(tmp_path):
    """No URL anywhere: the CLI starts the embedded server in ./.jobrun, says where, and
    migrates it; a command run in a subdirectory finds the project's ./.jobrun as git finds
    .git, instead of creating a second, empty database there."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JOBRUN_")}
    environ["PWD"] = str(tmp_path)
    first = run(environ, "enqueue", "zero.setup", '{"n": 1}', cwd=tmp_path)
    job = ok_json(first)
    assert job["created"] is True
    created = [line for line in first.stderr.splitlines() if "embedded PostgreSQL" in line]
    assert created == [f"jobrun: creating the embedded PostgreSQL in {tmp_path.resolve()}/.jobrun/"
                       " (set JOBRUN_DATABASE_URL to use your own server)"]
    listed = ok_json(run(environ, "list", "--json", cwd=tmp_path))
    assert [(j["id"], j["task"], j["payload"]) for j in listed] == [(job["id"], "zero.setup", {"n": 1})]
    assert (tmp_path / ".jobrun" / "pg").is_dir()
    deeper = tmp_path / "src" / "pkg"
    deeper.mkdir(parents=True)
    below = run(dict(environ, PWD=str(deeper)), "list", "--json", cwd=deeper)
    assert [j["id"] for j in ok_json(below)] == [job["id"]]
    assert "embedded PostgreSQL" not in below.stderr, "it joined the project's database"
    assert not (deeper / ".jobrun").exists() and not (tmp_path / "src" / ".jobrun").exists()


def test_enqueue_with_a_concurrency_key_and_the_queue_defaults(cli, pg_dsn, schema):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET priority_default = 9, max_attempts = 2,"
                             " version = version + 1 WHERE name = 'default'").format(
            sql.Identifier(schema, "queues")))
    job = ok_json(cli("enqueue", "t", "--concurrency-key", "customer:42", "--json"))
    assert (job["priority"], job["max_attempts"], job["concurrency_key"]) == (9, 2, "customer:42")
    line = fails(cli("enqueue", "t", "--concurrency-key", "a\tb"))
    assert "invalid concurrency key" in line
