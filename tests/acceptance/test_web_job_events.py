"""A job's transitions over the HTTP API of a real `jobrun web`: GET /jobs/{id}/events (who a
change through the API is by, 404 for an unknown job, the OpenAPI document), and the events
stream's `event: job` lines, filtered as the stream asked."""

from __future__ import annotations

import json
import time

import httpx

from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)


def envelope(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["code"] == code and "Traceback" not in r.text, body
    return body


def test_a_job_s_events_name_the_api_caller(api):
    job = api.post("/jobs", json={"task": "ev.t", "payload": {"n": 1}}).json()
    assert api.post(f"/jobs/{job['id']}/cancel").status_code == 200
    assert api.post(f"/jobs/{job['id']}/retry").status_code == 200
    r = api.get(f"/jobs/{job['id']}/events")
    assert r.status_code == 200, r.text
    found = r.json()
    assert [(e["event"], e["status"]) for e in found] == [
        ("enqueued", "queued"), ("cancelled", "cancelled"), ("requeued", "queued")]
    assert [e["actor"] for e in found[1:]] == ["api:127.0.0.1"] * 2
    assert found[0]["seq"] < found[1]["seq"] < found[2]["seq"]
    assert found[1]["at"].endswith("+00:00")


def test_events_of_an_unknown_job_are_a_404(api):
    assert "no job 99999999" in envelope(api.get("/jobs/99999999/events"), 404,
                                         "not_found")["message"]
    envelope(api.get("/jobs/0/events"), 422, "validation_failed")


def test_the_openapi_document_describes_the_events(api):
    doc = api.get("/openapi.json").json()
    route = doc["paths"]["/api/v1/jobs/{job_id}/events"]["get"]
    assert "404" in route["responses"]
    fields = doc["components"]["schemas"]["EventRecord"]["properties"]
    assert {"seq", "event", "status", "actor", "owner", "outcome", "at"} <= set(fields)


class JobStream:
    """The events stream with a filter, read over HTTP one event at a time."""

    def __init__(self, base: str, query: str) -> None:
        self.http = httpx.Client(timeout=httpx.Timeout(30.0))
        self.response = self.http.send(
            self.http.build_request("GET", base + "/api/v1/events?" + query), stream=True)
        self.lines = self.response.iter_lines()

    def next(self) -> tuple[str, dict]:
        kind = None
        for line in self.lines:
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind is not None:
                return kind, json.loads(line.removeprefix("data: "))
        raise AssertionError("the stream ended")

    def jobs_until(self, check, timeout: float = 30.0) -> list[dict]:
        """The job events up to the first for which ``check`` holds."""
        deadline, seen = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            kind, data = self.next()
            if kind == "job":
                seen.append(data)
                if check(data):
                    return seen
        raise AssertionError(f"no job event matched in {timeout} s; seen: {seen}")

    def close(self) -> None:
        self.response.close()
        self.http.close()


def test_the_stream_sends_the_transitions_of_the_job_it_names(api, web):
    mine = api.post("/jobs", json={"task": "ev.watch"}).json()["id"]
    other = api.post("/jobs", json={"task": "ev.watch"}).json()["id"]
    stream = JobStream(web.base, f"job={mine}")
    try:
        kind, _ = stream.next()
        assert kind == "snapshot"  # from here on, every transition of the job is sent
        api.post(f"/jobs/{other}/cancel")
        api.post(f"/jobs/{mine}/cancel")
        api.post(f"/jobs/{mine}/retry")
        seen = stream.jobs_until(lambda e: e["event"] == "requeued")
    finally:
        stream.close()
    assert [(e["job_id"], e["event"]) for e in seen] == [(mine, "cancelled"), (mine, "requeued")]
    assert seen[0]["queue"] == "default" and seen[0]["task"] == "ev.watch"
    assert seen[0]["actor"] == "api:127.0.0.1"


def test_the_stream_filters_by_queue_and_event(api, web):
    assert api.post("/queues", json={"name": "evq"}).status_code == 201
    stream = JobStream(web.base, "queue=evq&event=cancelled")
    try:
        assert stream.next()[0] == "snapshot"
        plain = api.post("/jobs", json={"task": "ev.q"}).json()["id"]
        mine = api.post("/jobs", json={"task": "ev.q", "queue": "evq"}).json()["id"]
        api.post(f"/jobs/{plain}/cancel")
        api.post(f"/jobs/{mine}/cancel")
        seen = stream.jobs_until(lambda e: e["job_id"] == mine)
    finally:
        stream.close()
    assert [(e["job_id"], e["event"]) for e in seen] == [(mine, "cancelled")]


def test_a_bad_stream_filter_is_one_clear_answer(web):
    for query, field in (("event=bogus", "event"), ("queue=bad%20name", "queue"),
                         ("job=0", "job"), ("&".join(f"job={i}" for i in range(1, 102)), "job")):
        r = httpx.get(web.base + "/api/v1/events?" + query, timeout=10)
        assert field in envelope(r, 422, "validation_failed")["fields"], query
