"""Bad input through every entry point (Client, the SQL functions, the `jobrun` CLI): one
clear line, nothing stored, and the same limits everywhere (nesting depth, number length,
times before year 10000)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

import jobrun
from jobrun import validate
from jobrun.records import JobSpec

DEEP = "[" * 10_000 + "]" * 10_000
LONG_INT = "1" * 5_001


def _deep(levels: int):
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def count(conn, schema) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(schema))).fetchone()[0]


def cli(db_env, tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "jobrun.admin.cli", *args], env=db_env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


def one_line_error(result) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jobrun: error: "), result.stderr
    return lines[0]


# --- Client ----------------------------------------------------------------------------

def test_client_far_delay_is_refused_and_nothing_stored(client, admin_conn, schema):
    with pytest.raises(jobrun.InvalidInput, match="at most 100 years"):
        client.enqueue("t", delay="600000w")
    with pytest.raises(jobrun.InvalidInput, match="at most 100 years"):
        client.enqueue_many([("t", 1)], delay="600000w")
    with pytest.raises(jobrun.InvalidInput, match="job 0: invalid delay"):
        client.enqueue_many([JobSpec("t", 1, delay=1e13)])
    with pytest.raises(jobrun.InvalidInput, match="out of range"):
        client.enqueue("t", run_at=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))))
    assert count(admin_conn, schema) == 0
    assert client.list() == []


def test_client_deep_and_long_numbers(client, admin_conn, schema):
    with pytest.raises(jobrun.InvalidInput, match="nested deeper than 100 levels"):
        client.enqueue("t", _deep(10_000))
    with pytest.raises(jobrun.InvalidInput, match="nested deeper than 100 levels"):
        client.enqueue("t", _deep(101))
    with pytest.raises(jobrun.InvalidInput, match="job 1: payload nested deeper"):
        client.enqueue_many([("t", 1), ("t", _deep(500))])
    with pytest.raises(jobrun.InvalidInput, match="nested deeper"):
        client.enqueue("t", DEEP, payload_is_json=True)
    with pytest.raises(jobrun.InvalidInput, match="more than 4300 digits"):
        client.enqueue("t", LONG_INT, payload_is_json=True)
    assert count(admin_conn, schema) == 0
    assert client.enqueue("t", _deep(100)).created  # the limit itself is allowed


def test_enqueue_many_items(client):
    made = client.enqueue_many([{"task": "a", "payload": {"x": 1}, "priority": 5},
                                {"task": "b"}])
    first, second = client.get(made[0][0]), client.get(made[1][0])
    assert (first.task, first.payload, first.priority) == ("a", {"x": 1}, 5)
    assert (second.task, second.payload) == ("b", None)
    with pytest.raises(jobrun.InvalidInput, match="^job 1: an item is a JobSpec.*not str$"):
        client.enqueue_many([("a", 1), "send-email"])
    with pytest.raises(jobrun.InvalidInput, match="^job 0: a mapping item has unknown field 'tsk'"):
        client.enqueue_many([{"tsk": "a"}])
    assert len(client.list()) == 2


# --- SQL ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    ("enqueue('t', %s::jsonb)", "payload 1 nested deeper than 100 levels"),
    ("enqueue_many(ARRAY['t', 't'], ARRAY['1'::jsonb, %s::jsonb])", "payload 2 nested deeper"),
])
def test_sql_refuses_deep_payloads(admin_conn, schema, call, message):
    with pytest.raises(psycopg.Error) as info:
        admin_conn.execute(f"SELECT * FROM {schema}.{call}", [DEEP])
    assert info.value.sqlstate == "JR001"
    assert message in info.value.diag.message_primary
    assert count(admin_conn, schema) == 0


@pytest.mark.parametrize("args, message", [
    ("'t', %s::jsonb", "payload 1 holds a number of more than 4300 digits"),
    ("'t', '1', delay => interval '-1 hour'", "invalid delay -01:00:00: must not be negative"),
    ("'t', '1', delay => interval '600000 weeks'", "at most 100 years"),
    ("'t', '1', run_at => '12000-01-01'", "run_at is out of range"),
    ("'t', '1', priority => 100000000000", "invalid priority 100000000000"),
    ("'t', '1', max_attempts => 5000000000", "invalid max_attempts 5000000000"),
])
def test_sql_refuses_bad_values(admin_conn, schema, args, message):
    params = [LONG_INT] if "%s" in args else []
    with pytest.raises(psycopg.Error) as info:
        admin_conn.execute(f"SELECT * FROM {schema}.enqueue({args})", params)
    assert info.value.sqlstate == "JR001", info.value
    assert message in info.value.diag.message_primary
    assert count(admin_conn, schema) == 0


def test_sql_error_shows_a_bad_name_short_and_printable(admin_conn, schema):
    name = "\x1b[31m\n" + "q" * 20_000
    for call in ("enqueue(%s)", "enqueue('t', '1', queue => %s)"):
        with pytest.raises(psycopg.Error) as info:
            admin_conn.execute(f"SELECT * FROM {schema}.{call}", [name])
        text = info.value.diag.message_primary
        assert info.value.sqlstate == "JR001"
        assert len(text) < 300 and "\x1b" not in text and "\n" not in text.strip(), text
    assert count(admin_conn, schema) == 0


def test_sql_allows_the_limits_themselves(admin_conn, schema):
    allowed = ["[" * 100 + "]" * 100, "9" * 4300, "-" + "9" * 4300, "0." + "0" * 5000 + "1",
               '{"a": "' + "[" * 5000 + '"}']
    for text in allowed:
        admin_conn.execute(f"SELECT * FROM {schema}.enqueue('t', %s::jsonb)", [text])
    assert count(admin_conn, schema) == len(allowed)
    for text in ["[" * 101 + "]" * 101, '{"a": ' * 101 + "1" + "}" * 101, "1e4300",
                 "-" + "1" * 4301]:
        with pytest.raises(psycopg.Error) as info:
            admin_conn.execute(f"SELECT * FROM {schema}.enqueue('t', %s::jsonb)", [text])
        assert info.value.sqlstate == "JR001", text[:20]
    assert count(admin_conn, schema) == len(allowed)


# --- CLI ------------------------------------------------------------------------------

@pytest.mark.parametrize("payload, message", [
    (DEEP, "payload nested deeper than 100 levels"),
    (LONG_INT, "payload holds a number of more than 4300 digits"),
])
def test_cli_refuses_bad_payloads_in_one_line(db_env, tmp_path, admin_conn, schema, payload, message):
    line = one_line_error(cli(db_env, tmp_path, "enqueue", "t", payload))
    assert message in line
    assert count(admin_conn, schema) == 0


def test_cli_refuses_a_far_delay(db_env, tmp_path, admin_conn, schema):
    line = one_line_error(cli(db_env, tmp_path, "enqueue", "t", "1", "--delay", "600000w"))
    assert "at most 100 years" in line
    assert count(admin_conn, schema) == 0
    listed = cli(db_env, tmp_path, "list", "--json")
    assert listed.returncode == 0, listed.stderr
