"""The workflow endpoints of a real `jobrun web`: POST /jobs with after, POST /workflows (and
its replay), GET /workflows/{id}, cancel; bad dependencies are one envelope that stores
nothing."""

from __future__ import annotations

import pytest

from tests.acceptance.test_web_jobs import count_jobs, envelope
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)

pytestmark = pytest.mark.acceptance


def test_a_job_after_another_and_a_workflow_round_trip(api):
    parent = api.post("/jobs", json={"task": "a"}).json()
    child = api.post("/jobs", json={"task": "b", "after": [parent["id"]],
                                    "on_parent_failure": "run"})
    assert child.status_code == 201, child.text
    assert child.json()["status"] == "waiting" and child.json()["on_parent_failure"] == "run"
    shape = {"chain": ["s1", {"group": ["g1", "g2"]}, {"task": "s3", "payload": [1]}]}
    made = api.post("/workflows", json={"workflow": shape}, headers={"Idempotency-Key": "w"})
    assert made.status_code == 201, made.text
    again = api.post("/workflows", json={"workflow": shape, "idempotency_key": "w"})
    assert again.status_code == 200 and again.json()["job_ids"] == made.json()["job_ids"]
    s1, g1, g2, s3 = made.json()["job_ids"]
    flow = api.get(f"/workflows/{made.json()['id']}").json()
    assert flow["shape"] == "chain" and flow["status"] == "running"
    assert {j["id"]: j["after"] for j in flow["jobs"]} == {s1: [], g1: [s1], g2: [s1], s3: [g1, g2]}
    assert [j["status"] for j in flow["jobs"]] == ["queued", "waiting", "waiting", "waiting"]
    cancelled = api.post(f"/workflows/{made.json()['id']}/cancel")
    assert cancelled.status_code == 200 and sorted(cancelled.json()["cancelled"]) == [s1, g1, g2, s3]
    assert api.get(f"/workflows/{made.json()['id']}").json()["status"] == "failed"


@pytest.mark.parametrize("path, body, status, code, text", [
    ("/jobs", {"task": "b", "after": [987654]}, 404, "not_found", "no job 987654 to wait for"),
    ("/jobs", {"task": "b", "on_parent_failure": "run"}, 422, "validation_failed",
     "on_parent_failure goes with after"),
    ("/jobs", {"task": "b", "after": [1], "delay": 5}, 422, "validation_failed",
     "after does not go with"),
    ("/jobs/batch", {"jobs": [{"task": "b", "after": [1]}]}, 422, "validation_failed",
     "after is not taken in a batch"),
    ("/workflows", {"workflow": {"graph": {"a": "t", "b": "t"}, "after": {"a": ["b"], "b": ["a"]}}},
     422, "validation_failed", "a cycle: "),
    ("/workflows", {"workflow": {"chain": ["ok", {"task": "t", "after": [987654]}]}}, 404,
     "not_found", "no job 987654"),
    ("/workflows", {"workflow": {"chord": ["a"]}}, 422, "validation_failed", "callback"),
])
def test_bad_dependencies_are_one_envelope_and_store_nothing(api, pg_dsn, web_schema, path, body,
                                                             status, code, text):
    api.post("/jobs", json={"task": "first"})
    before = count_jobs(pg_dsn, web_schema)
    assert text in envelope(api.post(path, json=body), status, code)["message"]
    assert count_jobs(pg_dsn, web_schema) == before


def test_an_unknown_workflow_is_a_404(api):
    envelope(api.get("/workflows/424242"), 404, "not_found")
    envelope(api.post("/workflows/424242/cancel"), 404, "not_found")
