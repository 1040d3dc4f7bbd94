"""Schedule and queue versions guard every change, as job versions do: update, pause, resume
and delete with a stale ``if_version`` (``--if-version`` on the command line) are refused with
the schedule or queue as it is and change nothing; with the current one they go ahead."""

from __future__ import annotations

import pytest

import jobrun
from jobrun.errors import StaleVersion
from tests.cliproc import fails, ok_json


def refused(call, current):
    """``call`` is refused as stale, carrying the schedule at version ``current``."""
    with pytest.raises(StaleVersion) as stale:
        call()
    found = stale.value.current
    assert (found["version"] if isinstance(found, dict) else found.version) == current
    assert f"at version {current}, not" in str(stale.value)


def test_a_stale_version_refuses_each_change_of_a_schedule(client):
    s = client.schedules
    made = s.create("nightly", "0 1 * * *", "report.build")
    assert made.version == 1
    refused(lambda: s.pause("nightly", if_version=0), 1)
    assert s.get("nightly").paused is False
    paused = s.pause("nightly", if_version=1)
    assert (paused.paused, paused.version) == (True, 2)
    refused(lambda: s.resume("nightly", if_version=1), 2)
    assert s.get("nightly").paused is True
    resumed = s.resume("nightly", if_version=2)
    assert (resumed.paused, resumed.version) == (False, 3)
    refused(lambda: s.update("nightly", cron="@hourly", if_version=2), 3)
    assert s.get("nightly").cron == "0 1 * * *"
    changed = s.update("nightly", cron="@hourly", if_version=3)
    assert (changed.cron, changed.version) == ("@hourly", 4)
    refused(lambda: s.delete("nightly", if_version=3), 4)
    assert s.get("nightly").version == 4
    assert s.delete("nightly", if_version=4).name == "nightly"
    with pytest.raises(jobrun.NotFound):
        s.get("nightly")
    with pytest.raises(jobrun.InvalidInput, match="^invalid version"):
        s.pause("gone", if_version=-1)


def test_unguarded_changes_still_go_ahead(client):
    s = client.schedules
    s.create("hourly", "@hourly", "t")
    assert s.pause("hourly").version == 2 and s.resume("hourly").version == 3
    assert s.update("hourly", priority=5).version == 4
    assert s.delete("hourly").name == "hourly"


def test_if_version_on_the_schedule_command_line(client, cli):
    client.schedules.create("nightly", "0 1 * * *", "report.build")
    for args in (("pause", "nightly"), ("resume", "nightly"),
                 ("update", "nightly", "--cron", "@daily"), ("delete", "nightly")):
        line = fails(cli("schedule", *args, "--if-version", "7"))
        assert "schedule 'nightly' is at version 1, not 7" in line, line
    assert client.schedules.get("nightly").version == 1
    assert ok_json(cli("schedule", "pause", "nightly", "--if-version", "1"))["version"] == 2
    assert ok_json(cli("schedule", "resume", "nightly", "--if-version", "2"))["version"] == 3
    assert ok_json(cli("schedule", "update", "nightly", "--cron", "@daily",
                       "--if-version", "3"))["cron"] == "@daily"
    assert ok_json(cli("schedule", "delete", "nightly", "--if-version", "4"))["deleted"] is True


def test_a_stale_version_refuses_each_change_of_a_queue(client, cli):
    client.queue_add("mail")
    assert client.queue_get("mail")["version"] == 0
    refused(lambda: client.pause_queue("mail", if_version=3), 0)
    assert client.queue_get("mail")["paused"] is False
    assert client.pause_queue("mail", if_version=0)["paused"] is True
    refused(lambda: client.resume_queue("mail", if_version=0), 1)
    assert client.resume_queue("mail", if_version=1)["version"] == 2
    refused(lambda: client.queue_delete("mail", if_version=1), 2)
    assert client.queue_get("mail")["version"] == 2
    for args in (("pause", "mail"), ("resume", "mail"), ("delete", "mail")):
        line = fails(cli("queue", *args, "--if-version", "9"))
        assert "queue 'mail' is at version 2, not 9" in line, line
    assert ok_json(cli("queue", "pause", "mail", "--if-version", "2"))["paused"] is True
    assert ok_json(cli("queue", "delete", "mail", "--if-version", "3"))["name"] == "mail"
    with pytest.raises(jobrun.NotFound):
        client.pause_queue("mail", if_version=3)
