"""The worker protocol (/api/v1/workers) on a real `jobrun web` and PostgreSQL: register, claim
with a long poll, renew, report under the lease token (409 for a stale one, nothing changed),
scoped worker tokens, and bad input answered in one line with nothing changed."""

from __future__ import annotations

import json
import threading
import time

import httpx
import psycopg
import pytest

import jobrun
from tests.invariants import remote_attempts
from tests.webproc import WebProcess, web_env, web_schema  # noqa: F401

pytestmark = pytest.mark.acceptance
ADMIN = "admin-token-0123456789abcdef"
MAIL = "mail-worker-token-0123456789"    # scoped to mail
OTHER = "other-worker-token-012345678"   # scoped to other


@pytest.fixture(scope="module")
def server(pg_dsn, web_schema, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokens")
    admin, workers = folder / "admin", folder / "workers"
    admin.write_text(ADMIN + "\n")
    workers.write_text(f"# worker tokens\n{MAIL} mail\n\n{OTHER} other,spare\n")
    for path in (admin, workers):
        path.chmod(0o600)
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        for name in ("mail", "other", "spare"):
            c.declare_queue(name)
    with WebProcess(web_env(pg_dsn, web_schema), "--token-file", str(admin),
                    "--worker-token-file", str(workers)) as web:
        web.pg_dsn, web.schema = pg_dsn, web_schema
        yield web


@pytest.fixture
def client(pg_dsn, web_schema):
    with jobrun.Client(pg_dsn, schema=web_schema) as c:
        yield c


def http(server, token=MAIL):
    return httpx.Client(base_url=server.base + "/api/v1", timeout=60,
                        headers={"Authorization": f"Bearer {token}"})


def register(api, queues=("mail",), credits=4, name="w1"):
    r = api.post("/workers", json={"name": name, "queues": list(queues), "credits": credits,
                                   "tasks": ["mail.send"]})
    assert r.status_code == 201, r.text
    return r.json()["worker"]


def test_claim_report_and_attempt_row(server, client, pg_dsn, web_schema):
    with http(server) as api:
        worker = register(api)
        job = client.enqueue("mail.send", {"to": "a@b"}, queue="mail").job
        r = api.post(f"/workers/{worker}/claim", json={"max": 4, "wait": 5})
        assert r.status_code == 200, r.text
        [got] = r.json()["jobs"]
        assert (got["id"], got["task"], got["payload"], got["attempt"]) == \
            (job.id, "mail.send", {"to": "a@b"}, 1)
        assert client.get(job.id).lease_owner == worker
        r = api.post(f"/workers/{worker}/renew", json={"jobs": [{"id": job.id,
                                                                 "token": got["token"]}]})
        assert r.json()["renewed"] == [{"id": job.id, "cancel_requested": False}]
        r = api.post(f"/workers/{worker}/outcomes", json={"outcomes": [{
            "id": job.id, "token": got["token"], "outcome": "succeeded", "result": {"sent": 1},
            "log": "sending\n"}]})
        assert r.status_code == 200 and r.json() == {"accepted": [job.id]}
        assert client.get(job.id).status == "succeeded"
        [attempt] = client.attempts(job.id)
        assert attempt.result == {"sent": 1} and attempt.worker_host == worker
        # The same report again: the lease is gone, so it is refused and changes nothing.
        again = api.post(f"/workers/{worker}/outcomes", json={"outcomes": [{
            "id": job.id, "token": got["token"], "outcome": "failed", "error": "late"}]})
        assert again.status_code == 409 and again.json()["code"] == "conflict"
        assert client.get(job.id).status == "succeeded" and len(client.attempts(job.id)) == 1
    with psycopg.connect(pg_dsn) as conn:
        assert remote_attempts(conn, web_schema) == []


def test_stale_token_refuses_the_whole_call(server, client):
    with http(server) as api:
        worker = register(api)
        a = client.enqueue("mail.send", 1, queue="mail").job
        b = client.enqueue("mail.send", 2, queue="mail").job
        jobs = api.post(f"/workers/{worker}/claim", json={"max": 2}).json()["jobs"]
        tokens = {j["id"]: j["token"] for j in jobs}
        assert set(tokens) == {a.id, b.id}
        r = api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": a.id, "token": tokens[a.id], "outcome": "succeeded"},
            {"id": b.id, "token": tokens[b.id] + 1, "outcome": "succeeded"}]})
        assert r.status_code == 409 and f"job {b.id}" in r.json()["message"]
        assert "\n" not in r.json()["message"]
        assert {client.get(a.id).status, client.get(b.id).status} == {"leased"}
        assert client.attempts(a.id) == [] and client.attempts(b.id) == []
        r = api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": i, "token": t, "outcome": "succeeded"} for i, t in tokens.items()]})
        assert r.status_code == 200


def test_a_report_claims_the_next_jobs_in_the_same_call(server, client):
    with http(server) as api:
        worker = register(api, credits=3)
        first = client.enqueue("mail.send", 0, queue="mail").job
        [got] = api.post(f"/workers/{worker}/claim", json={"max": 1}).json()["jobs"]
        nxt = [client.enqueue("mail.send", i, queue="mail").job.id for i in range(1, 6)]
        r = api.post(f"/workers/{worker}/outcomes", json={"claim": 5, "outcomes": [
            {"id": first.id, "token": got["token"], "outcome": "succeeded"}]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["accepted"] == [first.id] and client.get(first.id).status == "succeeded"
        claimed = [j["id"] for j in body["jobs"]]
        assert claimed == nxt[:3]  # at most its credits, in order, leased to it
        assert all(client.get(i).lease_owner == worker for i in claimed)
        # A refused report (a stale token) claims nothing either.
        r = api.post(f"/workers/{worker}/outcomes", json={"claim": 2, "outcomes": [
            {"id": j["id"], "token": j["token"] + 1, "outcome": "succeeded"}
            for j in body["jobs"]]})
        assert r.status_code == 409 and "jobs" not in r.json()
        assert [client.get(i).status for i in nxt[3:]] == ["queued", "queued"]
        r = api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": j["id"], "token": j["token"], "outcome": "succeeded"} for j in body["jobs"]]})
        assert r.json() == {"accepted": claimed}  # no claim asked: none made, none shown
        rest = api.post(f"/workers/{worker}/claim", json={"max": 3}).json()["jobs"]
        assert [j["id"] for j in rest] == nxt[3:]
        api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": j["id"], "token": j["token"], "outcome": "succeeded"} for j in rest]})


def test_a_reports_claim_obeys_queue_concurrency(server, client):
    client.queue_add("narrow", concurrency=2)
    with http(server, ADMIN) as api:
        worker = register(api, queues=("narrow",), credits=10)
        for i in range(5):
            client.enqueue("mail.send", i, queue="narrow")
        jobs = api.post(f"/workers/{worker}/claim", json={"max": 10}).json()["jobs"]
        assert len(jobs) == 2
        r = api.post(f"/workers/{worker}/outcomes", json={"claim": 10, "outcomes": [
            {"id": jobs[0]["id"], "token": jobs[0]["token"], "outcome": "succeeded"}]})
        assert len(r.json()["jobs"]) == 1  # one leased still, one room left under the limit
        left = [jobs[1], *r.json()["jobs"]]
        while left:  # the queue's other jobs, as the test leaves it empty
            r = api.post(f"/workers/{worker}/outcomes", json={"claim": 10, "outcomes": [
                {"id": j["id"], "token": j["token"], "outcome": "succeeded"} for j in left]})
            left = r.json()["jobs"]


def test_failure_retry_hint_permanent_and_dead(server, client):
    with http(server) as api:
        worker = register(api)
        retried = client.enqueue("mail.send", None, queue="mail", max_attempts=3).job
        dead = client.enqueue("mail.send", None, queue="mail", max_attempts=3).job
        jobs = {j["id"]: j for j in api.post(f"/workers/{worker}/claim",
                                             json={"max": 2}).json()["jobs"]}
        r = api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": retried.id, "token": jobs[retried.id]["token"], "outcome": "failed",
             "error": "smtp down", "retry_in": 120},
            {"id": dead.id, "token": jobs[dead.id]["token"], "outcome": "failed",
             "error": "no such mailbox", "permanent": True}]})
        assert r.status_code == 200, r.text
        again = client.get(retried.id)
        assert again.status == "queued" and again.attempts == 1
        assert 100 < (again.run_at - again.created_at).total_seconds() < 200
        assert client.get(dead.id).status == "dead"
        assert client.attempts(dead.id)[0].error == "no such mailbox"


def test_long_poll_is_woken_by_an_enqueue(server, client):
    with http(server) as api:
        worker = register(api)
        got = {}

        def poll():
            started = time.monotonic()
            got["reply"] = api.post(f"/workers/{worker}/claim", json={"max": 1, "wait": 20})
            got["took"] = time.monotonic() - started

        thread = threading.Thread(target=poll)
        thread.start()
        time.sleep(0.5)  # let the claim find nothing and wait (what is measured below)
        job = client.enqueue("mail.send", "now", queue="mail").job
        thread.join(30)
        assert [j["id"] for j in got["reply"].json()["jobs"]] == [job.id]
        assert got["took"] < 5  # woken, not the end of its 20 s wait
        empty = api.post(f"/workers/{worker}/claim", json={"max": 1, "wait": 0.3})
        assert empty.json()["jobs"] == []
        t = next(j for j in got["reply"].json()["jobs"])
        api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": t["id"], "token": t["token"], "outcome": "succeeded"}]})


def test_claims_obey_queue_concurrency(server, client):
    client.queue_add("capped", concurrency=2)
    with http(server, ADMIN) as api:
        worker = register(api, queues=("capped",), credits=10)
        for i in range(5):
            client.enqueue("mail.send", i, queue="capped")
        jobs = api.post(f"/workers/{worker}/claim", json={"max": 10}).json()["jobs"]
        assert len(jobs) == 2  # the queue's concurrency, inside the claim statement
        api.post(f"/workers/{worker}/outcomes", json={"outcomes": [
            {"id": j["id"], "token": j["token"], "outcome": "succeeded"} for j in jobs]})
        assert len(api.post(f"/workers/{worker}/claim", json={"max": 10}).json()["jobs"]) == 2


def test_worker_tokens_are_scoped(server, client):
    with http(server, MAIL) as mail, http(server, OTHER) as other:
        assert mail.post("/workers", json={"name": "x", "queues": ["other"],
                                           "credits": 1}).status_code == 403
        worker = register(other, queues=("other",))
        with psycopg.connect(server.pg_dsn) as conn:
            seen = f'SELECT last_seen FROM "{server.schema}".workers WHERE owner = %s'
            before = conn.execute(seen, [worker]).fetchone()
            for path in (f"/workers/{worker}/claim", f"/workers/{worker}/renew",
                         f"/workers/{worker}/outcomes"):
                body = {"max": 1} if path.endswith("claim") else {"jobs": []} \
                    if path.endswith("renew") else {"outcomes": [{"id": 1, "token": 1,
                                                                  "outcome": "succeeded"}]}
                r = mail.post(path, json=body)
                assert r.status_code == 403 and r.json()["code"] == "forbidden"
            assert mail.delete(f"/workers/{worker}").status_code == 403
            assert conn.execute(seen, [worker]).fetchone() == before  # not even marked seen
        # Nothing else of the API: not enqueue, not reads, not cancel, not the worker list.
        for method, path, body in (("POST", "/jobs", {"task": "t", "queue": "mail"}),
                                   ("GET", "/jobs", None), ("GET", "/queues", None),
                                   ("GET", "/workers", None), ("POST", "/jobs/1/cancel", None)):
            r = mail.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.text)
            assert MAIL not in r.text
        anonymous = httpx.post(server.base + "/api/v1/workers",
                               json={"name": "x", "queues": ["mail"], "credits": 1})
        assert anonymous.status_code == 401
    assert MAIL not in server.output() and OTHER not in server.output()


@pytest.mark.parametrize("path, body, status", [
    ("/workers", {"name": "x", "queues": ["mail"], "credits": 0}, 422),
    ("/workers", {"name": "../etc", "queues": ["mail"], "credits": 1}, 422),
    ("/workers", {"name": "x\u0000", "queues": ["mail"], "credits": 1}, 422),
    ("/workers", {"name": "x", "queues": ["ma il"], "credits": 1}, 422),
    ("/workers", {"name": "x", "queues": ["mail"], "credits": 1, "extra": 1}, 422),
    ("/workers/remote:x:0123456789abcdef/claim", {"max": 1}, 404),
    ("/workers/nobody/claim", {"max": 1}, 422),
    ("/workers/remote:x:0123456789abcdef/outcomes",
     {"outcomes": [{"id": 1, "token": 1, "outcome": "succeeded"}]}, 404),
    ("WORKER/claim", {"max": 0}, 422),
    ("WORKER/claim", {"max": 1, "wait": 3600}, 422),
    ("WORKER/outcomes", {"outcomes": []}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "succeeded"}],
                         "claim": -1}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "succeeded"}],
                         "claim": 1001}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "succeeded"}],
                         "claim": "5"}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "exploded"}]}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "failed",
                                       "error": "e" * 5000}]}, 422),
    ("WORKER/renew", {"jobs": [{"id": "1; drop table", "token": 1}]}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "failed",
                                       "error": "nul \u0000 here"}]}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "failed",
                                       "log": "half \ud800 a pair"}]}, 422),
    ("WORKER/outcomes", {"outcomes": [{"id": 1, "token": 1, "outcome": "succeeded",
                                       "result": "nul \u0000"}]}, 422),
])
def test_bad_input_is_one_line_and_changes_nothing(server, pg_dsn, web_schema, path, body, status):
    with http(server) as api:
        if path.startswith("WORKER"):
            path = f"/workers/{register(api, name='bad')}" + path[len("WORKER"):]
        before = everything(pg_dsn, web_schema)
        r = api.post(path, content=json.dumps(body),  # ASCII: a lone surrogate as an escape
                     headers={"Content-Type": "application/json"})
        assert r.status_code == status, r.text
        message = r.json()["message"]
        assert message and "\n" not in message
        assert everything(pg_dsn, web_schema) == before


def everything(pg_dsn, schema):
    """What a refused call must leave as it was: jobs, attempts, the registry."""
    with psycopg.connect(pg_dsn) as conn:
        return conn.execute(
            f'SELECT (SELECT array_agg((id, status, version, lease_token) ORDER BY id)::text'
            f'          FROM "{schema}".jobs),'
            f'       (SELECT count(*) FROM "{schema}".job_attempts),'
            f'       (SELECT array_agg(owner ORDER BY owner) FROM "{schema}".workers)').fetchone()


def test_malformed_and_oversized_bodies(server):
    with http(server) as api:
        worker = register(api, name="bad")
        r = api.post(f"/workers/{worker}/outcomes", content=b"{not json",
                      headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["code"] == "invalid_json"
        r = api.post(f"/workers/{worker}/outcomes", content=b"[" * 100 + b"1" + b"]" * 100)
        assert r.status_code in (400, 422)
        huge = {"outcomes": [{"id": 1, "token": 1, "outcome": "succeeded",
                              "result": "x" * (3 * 1024 * 1024)}]}
        r = api.post(f"/workers/{worker}/outcomes", json=huge)
        assert r.status_code == 413


def test_unregister(server):
    with http(server) as api:
        worker = register(api, name="bye")
        assert api.delete(f"/workers/{worker}").status_code == 204
        assert api.post(f"/workers/{worker}/claim", json={"max": 1}).status_code == 404
        assert api.delete(f"/workers/{worker}").status_code == 404


def test_a_bad_worker_token_file_is_one_line_at_start(pg_dsn, web_schema, tmp_path):
    import subprocess
    import sys

    path = tmp_path / "workers"
    env = web_env(pg_dsn, web_schema)

    def start(text: str, mode: int = 0o600):
        path.write_text(text)
        path.chmod(mode)
        return subprocess.run([sys.executable, "-m", "jobrun", "web", "--bind", "127.0.0.1:0",
                               "--worker-token-file", str(path)], env=env, capture_output=True,
                              text=True, timeout=60)

    for text, mode, says in ((f"{MAIL} mail\n", 0o644, "readable by others: chmod 600 it"),
                             (f"{MAIL} ma/il\n", 0o600, "line 1: invalid queue name"),
                             (f"{MAIL}\n", 0o600, "line 1: a token and its queues")):
        done = start(text, mode)
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("jobrun: error: ") and says in line and MAIL not in line
