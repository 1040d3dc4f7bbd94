"""`jobrun get ID --events` and `jobrun events mode`, run as real subprocesses: the table, the
JSON, who a change made from the command line is by, and bad input (one line, nothing
changed)."""

from __future__ import annotations

import getpass
import socket

from tests.cliproc import fails, ok, ok_json


def test_get_events_as_a_table_and_as_json(cli, execute):
    job = ok_json(cli("enqueue", "t", "{}"))
    ok_json(cli("cancel", str(job["id"])))
    table = ok(cli("get", str(job["id"]), "--events"))
    lines = [line.split() for line in table.splitlines() if line.strip()]
    assert lines[0][:4] == ["seq", "at", "event", "status"]
    assert [row[2:4] for row in lines[2:]] == [["enqueued", "queued"], ["cancelled", "cancelled"]]
    by = f"cli:{getpass.getuser()}@{socket.gethostname()}"
    assert lines[-1][4:6] == ["0", by]  # attempt, then the actor (no owner: never leased)
    got = ok_json(cli("get", str(job["id"]), "--events", "--json"))
    assert got["id"] == job["id"] and got["status"] == "cancelled"
    assert [(e["event"], e["actor"]) for e in got["events"]][-1] == ("cancelled", by)
    stored = execute("SELECT actor FROM {s}.job_events WHERE job_id = %s AND kind = 'cancelled'",
                     [job["id"]]).fetchone()
    assert stored == (by,)


def test_retry_from_the_command_line_names_its_caller(cli):
    job = ok_json(cli("enqueue", "t"))
    ok_json(cli("cancel", str(job["id"])))
    ok_json(cli("retry", str(job["id"])))
    events = ok_json(cli("get", str(job["id"]), "--events", "--json"))["events"]
    assert events[-1]["event"] == "requeued" and events[-1]["actor"].startswith("cli:")


def test_events_mode_shows_sets_and_refuses_a_bad_one(cli, execute):
    assert ok(cli("events", "mode")).strip() == "events mode: all"
    assert ok_json(cli("events", "mode", "terminal", "--json")) == {"mode": "terminal"}
    assert "invalid events mode 'most': one of none, terminal, all" in fails(
        cli("events", "mode", "most"))
    assert ok(cli("events", "mode")).strip() == "events mode: terminal"
    job = ok_json(cli("enqueue", "t"))
    assert "no events recorded" in ok(cli("get", str(job["id"]), "--events"))
    ok(cli("events", "mode", "none"))
    assert execute("SELECT value FROM {s}.settings WHERE name = 'job_events'").fetchone() == (0,)


def test_get_events_of_an_unknown_job_fails_in_one_line(cli):
    assert "no job 987654" in fails(cli("get", "987654", "--events"))
