"""`jobrun queue ...` run as a real subprocess against a real PostgreSQL: settings in and out,
version guards, one-line errors that change nothing, delete with and without --force."""

from __future__ import annotations

import pytest

from tests.cliproc import fails, ok, ok_json


def stored(execute, name):
    return execute("SELECT concurrency, rate_limit, extract(epoch FROM rate_period)::float8,"
                   " extract(epoch FROM aging)::float8, priority_default, max_attempts,"
                   " extract(epoch FROM retention)::float8, key_concurrency, version"
                   " FROM {s}.queues WHERE name = %s", [name]).fetchone()


def test_add_update_get_with_every_setting(cli, execute):
    made = ok_json(cli("queue", "add", "emails", "--concurrency", "4", "--rate", "50/s",
                       "--aging", "30s", "--priority-default", "-5", "--max-attempts", "3",
                       "--retention", "2d", "--key-concurrency", "2"))
    assert made["created"] is True and made["version"] == 0
    assert stored(execute, "emails") == (4, 50, 1.0, 30.0, -5, 3, 172800.0, 2, 0)
    changed = ok_json(cli("queue", "update", "emails", "--rate", "5/2s", "--aging", "none",
                          "--concurrency", "none", "--if-version", "0"))
    assert (changed["rate_limit"], changed["rate_period"], changed["aging"],
            changed["concurrency"], changed["version"]) == (5, 2.0, None, None, 1)
    assert stored(execute, "emails") == (None, 5, 2.0, None, -5, 3, 172800.0, 2, 1)
    got = ok_json(cli("queue", "get", "emails"))
    assert got == changed
    assert ok_json(cli("queue", "add", "emails", "--rate", "5/2s"))["created"] is False


def test_stale_version_is_a_conflict_that_changes_nothing(cli, execute):
    ok(cli("queue", "add", "q1", "--aging", "1m"))
    ok(cli("queue", "update", "q1", "--aging", "2m"))
    line = fails(cli("queue", "update", "q1", "--aging", "5m", "--if-version", "0"))
    assert "at version 1, not 0" in line
    assert stored(execute, "q1")[3] == 120.0


@pytest.mark.parametrize("args, message", [
    (["--rate", "5/x"], "invalid rate '5/x'"),
    (["--aging", "soon"], "invalid aging 'soon'"),
    (["--concurrency", "many"], "invalid concurrency 'many'"),
    (["--key-concurrency", "none"], "key_concurrency cannot be unset"),
    ([], "nothing to change"),
])
def test_bad_input_is_one_line_and_changes_nothing(cli, execute, args, message):
    # (every rule is tested on values in tests/unit/test_queue_rules.py; these go through argv)
    ok(cli("queue", "add", "q1", "--aging", "1m"))
    before = stored(execute, "q1")
    assert message in fails(cli("queue", "update", "q1", *args))
    assert stored(execute, "q1") == before
    if args:
        assert message in fails(cli("queue", "add", "q2", *args))
        assert execute("SELECT count(*) FROM {s}.queues WHERE name = 'q2'").fetchone() == (0,)


def test_list_shows_settings_and_live_counts(cli, client):
    client.queue_add("emails", aging="1m", rate="10/h")
    client.enqueue("t", queue="emails")
    client.enqueue("t", queue="emails", delay="1h")
    rows = {r["name"]: r for r in ok_json(cli("queue", "list", "--json"))}
    assert (rows["emails"]["queued"], rows["emails"]["scheduled"], rows["emails"]["leased"],
            rows["emails"]["aging"]) == (1, 1, 0, 60.0)
    table = ok(cli("queue", "list")).splitlines()
    assert table[0].split()[:5] == ["name", "paused", "queued", "scheduled", "leased"]
    line = next(t.split() for t in table if t.split()[:1] == ["emails"])
    assert line[1:4] == ["1", "1", "0"] and "10/3600s" in line and "60s" in line


def test_delete_refused_while_jobs_wait_then_forced(cli, client):
    client.queue_add("gone")
    job = client.enqueue("t", queue="gone").job
    line = fails(cli("queue", "delete", "gone"))
    assert "holds 1 queued and 0 leased job(s)" in line and "force" in line
    assert client.get(job.id).status == "queued"
    out = ok_json(cli("queue", "delete", "gone", "--force"))
    assert out["deleted_jobs"] == 1
    assert "not declared" in fails(cli("queue", "get", "gone"))
    assert "cannot be deleted" in fails(cli("queue", "delete", "default"))
