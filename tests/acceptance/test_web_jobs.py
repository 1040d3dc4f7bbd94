"""The jobs endpoints of a real `jobrun web` over HTTP: enqueue, replay, list, versions,
cancel, retry, delete, attempts and logs, and hostile input answered with the envelope."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

import jobrun
from jobrun.worker.claimer import claim_params
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)


def envelope(r, status, code):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) >= {"message", "code", "fields"} and body["code"] == code, body
    assert "Traceback" not in r.text and "SELECT" not in r.text
    return body


def count_jobs(pg_dsn, schema):
    with psycopg.connect(pg_dsn) as conn:
        return conn.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(
            sql.Identifier(schema))).fetchone()[0]


def test_enqueue_get_and_idempotent_replay(api):
    r = api.post("/jobs", json={"task": "mail.send", "payload": {"to": "a@b.c"}, "priority": 3})
    assert r.status_code == 201 and r.json()["created"] is True
    job = r.json()
    assert job["status"] == "queued" and job["version"] == 0 and job["priority"] == 3
    assert job["created_at"].endswith("+00:00")
    got = api.get(f"/jobs/{job['id']}")
    assert got.status_code == 200 and got.json()["payload"] == {"to": "a@b.c"}
    assert got.headers["etag"] == '"0"'

    first = api.post("/jobs", json={"task": "mail.send", "payload": 1},
                     headers={"Idempotency-Key": "k-1"})
    again = api.post("/jobs", json={"task": "mail.send", "payload": 1, "idempotency_key": "k-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["created"] is False
    clash = api.post("/jobs", json={"task": "mail.send", "payload": 2},
                     headers={"Idempotency-Key": "k-1"})
    assert "k-1" in envelope(clash, 409, "conflict")["message"]
    differ = api.post("/jobs", json={"task": "t", "idempotency_key": "a"},
                      headers={"Idempotency-Key": "b"})
    envelope(differ, 422, "validation_failed")


def test_a_replay_answers_the_job_as_it_is_and_its_etag_guards(api, pg_dsn, web_schema):
    assert api.post("/queues", json={"name": "replays"}).status_code == 201
    job = {"task": "r.t", "payload": 1, "queue": "replays"}
    made = api.post("/jobs", json=job, headers={"Idempotency-Key": "r"})
    assert made.status_code == 201 and made.headers["etag"] == '"0"'
    with jobrun.Client(pg_dsn, schema=web_schema) as client, client._connection().cursor() as cur:
        cur.execute(client.queries.claim_jobs, claim_params(["replays"], 1, "h:1:x", 30))
        assert cur.fetchone()["id"] == made.json()["id"]
    replay = api.post("/jobs", json=job, headers={"Idempotency-Key": "r"})
    got = api.get(f"/jobs/{made.json()['id']}")
    assert replay.status_code == 200 and replay.json()["created"] is False
    assert {**replay.json(), "created": None} == {**got.json(), "created": None}
    assert replay.headers["etag"] == got.headers["etag"] == '"1"'
    assert (replay.json()["lease_token"], replay.json()["status"]) == (1, "leased")
    assert replay.json()["started_at"] is not None
    cancel = api.post(f"/jobs/{made.json()['id']}/cancel",
                      headers={"If-Match": replay.headers["etag"]})
    assert cancel.status_code == 200 and cancel.json()["cancel_requested"] is True


def test_validation_uses_the_client_rules(api, pg_dsn, web_schema):
    before = count_jobs(pg_dsn, web_schema)
    cases = [({"task": "bad name"}, "task"), ({"task": "t", "priority": 101}, "priority"),
             ({"task": "t", "queue": "nope"}, "queue"), ({"task": "t", "max_attempts": 0},
                                                          "max_attempts"),
             ({"task": "t", "delay": "soon"}, "delay"), ({"task": "t", "payload": "a\x00b"},
                                                         "payload"),
             ({"task": "t", "payload": {"k\x00": 1}}, "payload"),
             ({"task": "t", "unknown": 1}, "unknown"), ({"task": 5}, "task"),
             ({"task": "t", "run_at": "2030-01-01T00:00:00"}, "run_at")]
    for body, field in cases:
        err = envelope(api.post("/jobs", json=body), 422, "validation_failed")
        assert field in err["fields"], (body, err)
    assert count_jobs(pg_dsn, web_schema) == before


def test_hostile_bodies_get_the_envelope_and_store_nothing(api, pg_dsn, web_schema):
    before = count_jobs(pg_dsn, web_schema)
    envelope(api.post("/jobs", content=b'{"task": "t",'), 400, "invalid_json")
    envelope(api.post("/jobs", content=b"\xff\xfe"), 400, "invalid_json")
    envelope(api.post("/jobs", content=b'{"task": "t", "payload": NaN}',
                      headers={"content-type": "application/json"}), 422, "validation_failed")
    deep = b'{"task": "t", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    envelope(api.post("/jobs", content=deep), 400, "invalid_json")
    middling = b'{"task": "t", "payload": ' + b"[" * 950 + b"]" * 950 + b"}"
    envelope(api.post("/jobs", content=middling), 422, "validation_failed")
    envelope(api.post("/jobs", content=b"x" * 10_000_000), 413, "payload_too_large")
    envelope(api.post("/jobs/batch", content=b"[" + b"1," * 5_000_000 + b"1]"), 413,
             "payload_too_large")

    def chunks():
        for _ in range(100):
            yield b" " * 100_000

    envelope(api.post("/jobs", content=chunks()), 413, "payload_too_large")
    assert count_jobs(pg_dsn, web_schema) == before


def test_batch(api, pg_dsn, web_schema):
    r = api.post("/jobs/batch", json={"jobs": [{"task": "b.one", "payload": [1]},
                                               {"task": "b.two", "idempotency_key": "bk"}]})
    assert r.status_code == 201
    ids = [j["id"] for j in r.json()["jobs"]]
    assert ids == sorted(ids) and [j["created"] for j in r.json()["jobs"]] == [True, True]
    replay = api.post("/jobs/batch", json={"jobs": [{"task": "b.two", "idempotency_key": "bk"}]})
    assert replay.status_code == 200 and replay.json()["jobs"] == [{"id": ids[1], "created": False}]
    before = count_jobs(pg_dsn, web_schema)
    bad = api.post("/jobs/batch", json={"jobs": [{"task": "ok"}, {"task": "no good"}]})
    assert "jobs.1.task" in envelope(bad, 422, "validation_failed")["fields"]
    envelope(api.post("/jobs/batch", json={"jobs": []}), 422, "validation_failed")
    assert count_jobs(pg_dsn, web_schema) == before


def test_list_filters_and_cursor(api):
    made = [api.post("/jobs", json={"task": "list.t", "idempotency_key": f"lk-{n}"}).json()["id"]
            for n in range(5)]
    api.post(f"/jobs/{made[0]}/cancel")
    page = api.get("/jobs", params={"task": "list.t", "limit": 2})
    assert page.status_code == 200
    seen, cursor = [j["id"] for j in page.json()["jobs"]], page.json()["next_cursor"]
    while cursor:
        nxt = api.get("/jobs", params={"task": "list.t", "limit": 2, "cursor": cursor}).json()
        seen += [j["id"] for j in nxt["jobs"]]
        cursor = nxt["next_cursor"]
    assert seen == sorted(made, reverse=True)
    both = api.get("/jobs", params=[("task", "list.t"), ("status", "cancelled"),
                                    ("status", "dead")]).json()["jobs"]
    assert [j["id"] for j in both] == [made[0]]
    assert [j["id"] for j in api.get("/jobs", params={"q": "lk-3"}).json()["jobs"]] == [made[3]]
    assert all(j["queue"] == "default" for j in api.get("/jobs", params={"queue": "default"}).json()["jobs"])
    for params in ({"status": "bogus"}, {"limit": 101}, {"limit": 0}, {"cursor": "x"},
                   {"colour": "red"}, {"task": "bad name"}):
        envelope(api.get("/jobs", params=params), 422, "validation_failed")


def test_versions_guard_cancel_retry_delete(api):
    job = api.post("/jobs", json={"task": "v.t"}).json()
    stale = api.post(f"/jobs/{job['id']}/cancel", json={"version": 7})
    body = envelope(stale, 409, "conflict")
    assert body["current"]["id"] == job["id"] and body["current"]["version"] == 0
    assert api.get(f"/jobs/{job['id']}").json()["status"] == "queued"
    cancelled = api.post(f"/jobs/{job['id']}/cancel", headers={"If-Match": '"0"'})
    assert cancelled.status_code == 200 and cancelled.json()["version"] == 1
    envelope(api.post(f"/jobs/{job['id']}/cancel"), 409, "conflict")  # already finished
    envelope(api.post(f"/jobs/{job['id']}/retry", json={"version": 0}), 409, "conflict")
    retried = api.post(f"/jobs/{job['id']}/retry", json={"version": 1})
    assert retried.json()["status"] == "queued" and retried.json()["version"] == 2
    envelope(api.request("DELETE", f"/jobs/{job['id']}"), 409, "conflict")  # not finished
    api.post(f"/jobs/{job['id']}/cancel")
    envelope(api.request("DELETE", f"/jobs/{job['id']}", headers={"If-Match": '"2"'}), 409,
             "conflict")
    envelope(api.post(f"/jobs/{job['id']}/cancel", json={"version": 1},
                      headers={"If-Match": '"2"'}), 422, "validation_failed")
    envelope(api.post(f"/jobs/{job['id']}/cancel", headers={"If-Match": "abc"}), 422,
             "validation_failed")
    gone = api.request("DELETE", f"/jobs/{job['id']}", json={"version": 3})
    assert gone.status_code == 200 and gone.json()["status"] == "cancelled"
    envelope(api.get(f"/jobs/{job['id']}"), 404, "not_found")
    envelope(api.post(f"/jobs/{job['id']}/retry"), 404, "not_found")
    envelope(api.get("/jobs/0"), 422, "validation_failed")


def _finish(pg_dsn, schema, job_id, outcomes):
    """Record finished attempts for a job, as a master would have (fixture data)."""
    with psycopg.connect(pg_dsn) as conn:
        ident = sql.Identifier(schema)
        for n, outcome in enumerate(outcomes, 1):
            conn.execute(sql.SQL(
                "INSERT INTO {}.job_attempts (job_id, lease_token, attempt, worker_host,"
                " worker_pid, started_at, finished_at, outcome, error, log) VALUES"
                " (%s, %s, %s, 'h', 1, now() - interval '2 s', now(), %s, %s, %s)").format(ident),
                [job_id, n, n, outcome, None if outcome == "succeeded" else "boom",
                 f"log of attempt {n}\n"])
        conn.execute(sql.SQL("UPDATE {}.jobs SET status = %s, attempts = %s,"
                             " finished_at = now(), version = version + 1 WHERE id = %s").format(ident),
                     ["succeeded" if outcomes[-1] == "succeeded" else "dead", len(outcomes), job_id])


def test_attempts_logs_and_feed(api, pg_dsn, web_schema):
    job = api.post("/jobs", json={"task": "att.t", "queue": "default"}).json()
    assert api.get(f"/jobs/{job['id']}/attempts").json() == []
    _finish(pg_dsn, web_schema, job["id"], ["failed", "succeeded"])
    found = api.get(f"/jobs/{job['id']}/attempts").json()
    assert [a["outcome"] for a in found] == ["failed", "succeeded"]
    logs = api.get(f"/jobs/{job['id']}/attempts/2/logs").json()
    assert [entry["log"] for entry in logs] == ["log of attempt 2\n"]
    envelope(api.get(f"/jobs/{job['id']}/attempts/3/logs"), 404, "not_found")
    envelope(api.get("/jobs/999999/attempts"), 404, "not_found")
    feed = api.get("/attempts", params={"task": "att.t", "limit": 1}).json()
    assert len(feed["attempts"]) == 1 and feed["next_cursor"]
    rest = api.get("/attempts", params={"task": "att.t", "cursor": feed["next_cursor"]}).json()
    assert {a["outcome"] for a in feed["attempts"] + rest["attempts"]} == {"failed", "succeeded"}
    failed = api.get("/attempts", params={"outcome": "failed", "task": "att.t"}).json()
    assert [a["outcome"] for a in failed["attempts"]] == ["failed"]
    envelope(api.get("/attempts", params={"outcome": "exploded"}), 422, "validation_failed")
    envelope(api.get("/attempts", params={"cursor": "nonsense"}), 422, "validation_failed")


def test_unknown_routes_and_methods(api):
    envelope(api.get("/nothing/here"), 404, "not_found")
    envelope(api.put("/jobs"), 405, "method_not_allowed")
    assert json.loads(api.get("/healthz").text)["ok"] is True


def test_concurrency_key_and_queue_defaults(api, pg_dsn, web_schema):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET priority_default = -4, max_attempts = 7,"
                             " version = version + 1 WHERE name = 'default'").format(
            sql.Identifier(web_schema, "queues")))
    r = api.post("/jobs", json={"task": "t", "concurrency_key": "customer:42"})
    assert r.status_code == 201, r.text
    job = r.json()
    assert (job["priority"], job["max_attempts"], job["concurrency_key"]) == (-4, 7, "customer:42")
    r = api.post("/jobs/batch", json={"jobs": [{"task": "t", "concurrency_key": "c:1"},
                                               {"task": "t", "priority": 2}]})
    assert r.status_code == 201, r.text
    first, second = (api.get(f"/jobs/{j['id']}").json() for j in r.json()["jobs"])
    assert (first["concurrency_key"], first["priority"], second["priority"]) == ("c:1", -4, 2)
    before = count_jobs(pg_dsn, web_schema)
    err = envelope(api.post("/jobs", json={"task": "t", "concurrency_key": "a\nb"}), 422,
                   "validation_failed")
    assert "concurrency_key" in err["fields"], err
    err = envelope(api.post("/jobs/batch", json={"jobs": [{"task": "t", "concurrency_key": ""}]}),
                   422, "validation_failed")
    assert "jobs.0.concurrency_key" in err["fields"], err
    assert count_jobs(pg_dsn, web_schema) == before
