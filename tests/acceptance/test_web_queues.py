"""/api/v1/queues against a real `jobrun web` over a socket: create, read, version-guarded
PATCH, DELETE with ?force, pause/resume with interval settings (seconds in every response),
and the error envelope."""

from __future__ import annotations

import jobrun
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)

SETTINGS = ("concurrency", "rate_limit", "rate_period", "aging", "priority_default",
            "max_attempts", "retention", "key_concurrency")


def test_create_read_patch_delete(api):
    r = api.post("/queues", json={"name": "mail", "aging": "30s", "rate": "5/2s",
                                  "retention": 86400, "concurrency": 3})
    assert r.status_code == 201, r.text
    made = r.json()
    assert {k: made[k] for k in SETTINGS} == {
        "concurrency": 3, "rate_limit": 5, "rate_period": 2.0, "aging": 30.0,
        "priority_default": 0, "max_attempts": None, "retention": 86400.0, "key_concurrency": 1}
    assert r.headers["ETag"] == f'"{made["version"]}"'
    assert api.post("/queues", json={"name": "mail", "aging": 30}).status_code == 200
    clash = api.post("/queues", json={"name": "mail", "aging": "1m"})
    assert clash.status_code == 409 and clash.json()["code"] == "conflict"

    listed = {q["name"]: q for q in api.get("/queues").json()}
    assert listed["mail"]["aging"] == 30.0 and listed["mail"]["queue"] == "mail"
    assert "queued" in listed["mail"] and "wait_p50" in listed["mail"]
    one = api.get("/queues/mail").json()
    assert {k: one[k] for k in SETTINGS} == {k: made[k] for k in SETTINGS}

    patched = api.patch("/queues/mail", json={"aging": None, "version": made["version"]})
    assert patched.status_code == 200 and patched.json()["aging"] is None
    stale = api.patch("/queues/mail", json={"aging": 5}, headers={"If-Match": f'"{made["version"]}"'})
    assert stale.status_code == 409
    assert stale.json()["current"]["version"] == made["version"] + 1
    assert stale.json()["current"]["aging"] is None

    api.post("/jobs", json={"task": "t", "queue": "mail"})
    refused = api.delete("/queues/mail")
    assert refused.status_code == 409 and "1 queued" in refused.json()["message"]
    gone = api.delete("/queues/mail", params={"force": "true"})
    assert gone.status_code == 200 and gone.json()["deleted_jobs"] == 1
    assert api.get("/queues/mail").status_code == 404


def test_bad_settings_are_422_naming_the_field(api):
    api.post("/queues", json={"name": "strict"})
    for body, field in [({"aging": "soon"}, "aging"), ({"rate": "5/x"}, "rate"),
                        ({"concurrency": 0}, "concurrency"), ({"aging": True}, "aging"),
                        ({"colour": "red"}, "colour"), ({}, None)]:
        r = api.patch("/queues/strict", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["code"] == "validation_failed"
        if field:
            assert any(k.split(".")[0] == field for k in r.json()["fields"]), (body, r.json())
    assert api.get("/queues/strict").json()["version"] == 0  # nothing changed
    assert api.post("/queues", json={"name": "bad name!"}).status_code == 422
    assert api.patch("/queues/nope", json={"aging": 1}).status_code == 404


def test_pause_and_resume_a_queue_with_interval_settings(api, pg_dsn, web_schema):
    # Intervals serialise as seconds: this answered 500 when the row came back with
    # interval values (a timedelta the JSON encoder refused).
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        c.queue_add("aged", aging="1m", retention="1d", rate="10/h")
    paused = api.post("/queues/aged/pause")
    assert paused.status_code == 200, paused.text
    assert (paused.json()["paused"], paused.json()["aging"]) == (True, 60.0)
    resumed = api.post("/queues/aged/resume").json()
    assert (resumed["paused"], resumed["rate_period"]) == (False, 3600.0)


def test_a_stale_version_refuses_pause_resume_and_delete_of_a_queue(api):
    made = api.post("/queues", json={"name": "guarded"})
    assert made.status_code == 201 and made.headers["etag"] == '"0"'
    for r in (api.post("/queues/guarded/pause", headers={"If-Match": '"5"'}),
              api.post("/queues/guarded/resume", json={"version": 5}),
              api.request("DELETE", "/queues/guarded", headers={"If-Match": '"5"'})):
        assert r.status_code == 409 and r.json()["code"] == "conflict", r.text
        assert r.json()["current"]["version"] == 0
    assert api.get("/queues/guarded").json()["paused"] is False
    paused = api.post("/queues/guarded/pause", headers={"If-Match": made.headers["etag"]})
    assert paused.status_code == 200 and paused.json()["paused"] is True
    assert api.post("/queues/guarded/resume", json={"version": 1}).json()["version"] == 2
    gone = api.request("DELETE", "/queues/guarded", json={"version": 2})
    assert gone.status_code == 200 and api.get("/queues/guarded").status_code == 404
