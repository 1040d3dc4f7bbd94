"""/api/v1/schedules on a real `jobrun web`: create, read, change, pause, resume and delete
schedules over HTTP, with the same rules (and the same one-line errors) as the CLI and Client;
a bad expression, zone or window is refused at once and nothing is stored."""

from __future__ import annotations

from datetime import datetime

import jobrun
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)


def test_schedule_lifecycle_over_http(api, pg_dsn, web_schema):
    made = api.post("/schedules", json={"name": "nightly", "cron": "30 1 * * *",
                                        "task": "report.build", "payload": {"kind": "daily"},
                                        "timezone": "America/New_York"})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["status"] == "active" and body["declared"] is False
    fires = [datetime.fromisoformat(t) for t in body["next_fires"]]
    assert len(fires) == 5 and fires == sorted(set(fires))
    assert all(t.utcoffset().total_seconds() == 0 for t in fires)  # UTC, RFC 3339

    listed = api.get("/schedules").json()["schedules"]
    assert [s["name"] for s in listed] == ["nightly"]
    one = api.get("/schedules/nightly").json()
    assert one["task"] == "report.build" and one["payload"] == {"kind": "daily"}
    assert one["runs"] == []

    again = api.post("/schedules", json={"name": "nightly", "cron": "* * * * *", "task": "t"})
    assert again.status_code == 409 and again.json()["code"] == "conflict"

    changed = api.patch("/schedules/nightly", json={"cron": "@hourly", "catch_up": "none"})
    assert changed.status_code == 200, changed.text
    assert (changed.json()["cron"], changed.json()["catch_up"]) == ("@hourly", "none")

    paused = api.post("/schedules/nightly/pause").json()
    assert paused["status"] == "paused" and paused["next_fires"] == []
    resumed = api.post("/schedules/nightly/resume").json()
    assert resumed["status"] == "active" and len(resumed["next_fires"]) == 5

    with jobrun.Client(pg_dsn, schema=web_schema) as client:  # the same rows as the Client's
        assert client.schedules.get("nightly").cron == "@hourly"
        other = client.enqueue("report.build", None).job.id
    assert api.get("/jobs", params={"schedule": "nightly"}).json()["jobs"] == []
    assert other in [j["id"] for j in api.get("/jobs").json()["jobs"]]
    assert api.get("/jobs", params={"schedule": "bad name!"}).status_code == 422

    gone = api.delete("/schedules/nightly")
    assert gone.status_code == 200 and gone.json()["name"] == "nightly"
    assert api.get("/schedules/nightly").status_code == 404
    assert api.get("/schedules").json()["schedules"] == []


def test_a_stale_version_refuses_each_change_of_a_schedule_over_http(api):
    made = api.post("/schedules", json={"name": "guarded", "cron": "0 1 * * *", "task": "t"})
    assert made.status_code == 201 and made.headers["etag"] == '"1"'
    stale = [api.post("/schedules/guarded/pause", headers={"If-Match": '"0"'}),
             api.post("/schedules/guarded/resume", json={"version": 0}),
             api.patch("/schedules/guarded", json={"cron": "@daily", "version": 0}),
             api.patch("/schedules/guarded", json={"cron": "@daily"}, headers={"If-Match": '"0"'}),
             api.request("DELETE", "/schedules/guarded", headers={"If-Match": '"0"'})]
    for r in stale:
        assert r.status_code == 409 and r.json()["code"] == "conflict", r.text
        assert r.json()["current"]["version"] == 1 and "at version 1, not 0" in r.json()["message"]
    one = api.get("/schedules/guarded")
    assert (one.json()["cron"], one.json()["paused"], one.headers["etag"]) == ("0 1 * * *", False,
                                                                                '"1"')
    paused = api.post("/schedules/guarded/pause", headers={"If-Match": one.headers["etag"]})
    assert paused.status_code == 200 and paused.headers["etag"] == '"2"'
    resumed = api.post("/schedules/guarded/resume", json={"version": 2})
    assert resumed.json()["status"] == "active" and resumed.json()["version"] == 3
    changed = api.patch("/schedules/guarded", json={"cron": "@daily"}, headers={"If-Match": '"3"'})
    assert changed.json()["cron"] == "@daily" and changed.headers["etag"] == '"4"'
    clash = api.patch("/schedules/guarded", json={"cron": "@daily", "version": 4},
                      headers={"If-Match": '"3"'})
    assert clash.status_code == 422
    gone = api.request("DELETE", "/schedules/guarded", json={"version": 4})
    assert gone.status_code == 200 and api.get("/schedules/guarded").status_code == 404


def test_bad_schedules_are_refused_and_nothing_is_stored(api):
    bad = [
        ({"name": "x", "cron": "61 * * * *", "task": "t"}, "cron"),
        ({"name": "x", "cron": "* * * * *", "task": "t", "timezone": "Mars/Olympus"}, "zone"),
        ({"name": "x", "cron": "* * * * *", "task": "t", "starts_at": "2030-01-02T00:00:00Z",
          "ends_at": "2030-01-01T00:00:00Z"}, "window"),
        ({"name": "x", "cron": "* * * * *", "task": "t", "catch_up": "some"}, "catch-up"),
        ({"name": "bad name!", "cron": "* * * * *", "task": "t"}, "name"),
        ({"name": "x", "cron": "* * * * *", "task": "t", "colour": "red"}, "colour"),
    ]
    for body, word in bad:
        r = api.post("/schedules", json=body)
        assert r.status_code == 422, (body, r.text)
        envelope = r.json()
        assert envelope["code"] == "validation_failed" and "\n" not in envelope["message"]
        assert word in (envelope["message"] + str(envelope["fields"])).lower(), envelope
    assert api.get("/schedules").json()["schedules"] == []
    r = api.patch("/schedules/missing", json={"cron": "@daily"})
    assert r.status_code == 404 and r.json()["code"] == "not_found"
