"""Property: random operations through the HTTP API and through the Client leave the same rows.

Each example runs one sequence of enqueue / cancel / retry / delete (some guarded by the
current or a stale version) twice: over HTTP against a real `jobrun web` on one schema, and
through jobrun.Client on another. Every step must end the same way on both (done, conflict,
not found, invalid) and the jobs must end identical, versions included.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import jobrun
from jobrun.errors import Conflict, InvalidInput, NotFound, Refused
from tests.webproc import api, web, web_schema  # noqa: F401 (fixtures)
from tests.profiles import examples

FIELDS = ("task", "status", "payload", "queue", "priority", "attempts", "idempotency_key",
          "version", "cancel_requested")

payloads = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=5),
                     st.lists(st.integers(0, 3), max_size=3))
enqueue = st.tuples(st.just("enqueue"), st.sampled_from(["p.a", "p.b", "bad name"]), payloads,
                    st.one_of(st.none(), st.sampled_from(["k1", "k2"])))
change = st.tuples(st.sampled_from(["cancel", "retry", "delete"]), st.integers(0, 5),
                   st.sampled_from([None, "current", "stale"]))
programs = st.lists(st.one_of(enqueue, change), min_size=1, max_size=12)


@pytest.fixture(scope="module")
def client(pg_dsn):
    from tests.conftest import _drop_schema, _new_schema

    schema = _new_schema(pg_dsn)
    with jobrun.Client(pg_dsn, schema=schema) as c:
        yield c
    _drop_schema(pg_dsn, schema)


def via_client(client, step, ids, prefix):
    try:
        if step[0] == "enqueue":
            _, task, payload, key = step
            r = client.enqueue(task, payload, idempotency_key=key and prefix + key)
            ids.append(r.job.id) if r.job.id not in ids else None
            return "done"
        op, n, guard = step
        if n >= len(ids):
            return "skip"
        job_id = ids[n]
        version = None
        if guard:
            try:
                version = client.get(job_id).version + (guard == "stale")
            except NotFound:
                version = 0
        getattr(client, op)(job_id, if_version=version)
        return "done"
    except (Conflict, Refused):
        return "conflict"
    except NotFound:
        return "not_found"
    except InvalidInput:
        return "invalid"


def via_api(api, step, ids, prefix):
    if step[0] == "enqueue":
        _, task, payload, key = step
        body = {"task": task, "payload": payload}
        if key:
            body["idempotency_key"] = prefix + key
        r = api.post("/jobs", json=body)
        if r.status_code in (200, 201) and r.json()["id"] not in ids:
            ids.append(r.json()["id"])
    else:
        op, n, guard = step
        if n >= len(ids):
            return "skip"
        job_id = ids[n]
        headers = {}
        if guard:
            got = api.get(f"/jobs/{job_id}")
            current = got.json()["version"] if got.status_code == 200 else 0
            headers["If-Match"] = f'"{current + (guard == "stale")}"'
        method, path = ("DELETE", f"/jobs/{job_id}") if op == "delete" else (
            "POST", f"/jobs/{job_id}/{op}")
        r = api.request(method, path, headers=headers)
    return {200: "done", 201: "done", 409: "conflict", 404: "not_found",
            422: "invalid"}[r.status_code]


def rows_by_client(client, ids):
    out = []
    for job_id in ids:
        try:
            job = client.get(job_id).to_dict()
            out.append({f: job[f] for f in FIELDS})
        except NotFound:
            out.append(None)
    return out


def rows_by_api(api, ids):
    out = []
    for job_id in ids:
        r = api.get(f"/jobs/{job_id}")
        out.append({f: r.json()[f] for f in FIELDS} if r.status_code == 200 else None)
    return out


@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(program=programs)
def test_api_and_client_agree(api, client, program):
    prefix = uuid.uuid4().hex[:8] + "-"
    api_ids: list[int] = []
    client_ids: list[int] = []
    for step in program:
        assert via_api(api, step, api_ids, prefix) == via_client(client, step, client_ids,
                                                                 prefix), step
    strip = [{**r, "idempotency_key": r["idempotency_key"] and r["idempotency_key"][9:]}
             if r else None for r in rows_by_api(api, api_ids)]
    want = [{**r, "idempotency_key": r["idempotency_key"] and r["idempotency_key"][9:]}
            if r else None for r in rows_by_client(client, client_ids)]
    assert strip == want
