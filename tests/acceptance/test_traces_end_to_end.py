"""One trace from the producer to the job's end, across real processes: a Client enqueue and a
`curl -H traceparent:` POST to `jobrun web` reach the attempt span a child of a real master
exports over OTLP/HTTP to a receiver in this test (which decodes the protobuf it gets); the
master's completion spans and job metrics arrive there too. And `jobrun web`'s request ids
(header, error envelope, access log) and CORS origins from the settings."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess
from tests.webproc import WebProcess, web_env

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytestmark = pytest.mark.acceptance

APP = "tests.apps.obsapp"
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def receiver():
    from tests.otel import Receiver

    r = Receiver().start()
    yield r
    r.stop()


def descends(receiver, span, ancestor: str) -> bool:
    """Whether ``ancestor`` is ``span``'s parent, or its parent's, and so on."""
    by_id = {s.span_id: s for s in receiver.find(trace_id=span.trace_id)}
    seen = set()
    while span.parent_id and span.parent_id not in seen:
        if span.parent_id == ancestor:
            return True
        seen.add(span.parent_id)
        if span.parent_id not in by_id:
            return False
        span = by_id[span.parent_id]
    return False


def exporting(env: dict[str, str], receiver) -> dict[str, str]:
    return {**env, "OTEL_ENABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "200"}


def test_one_trace_from_the_producer_through_the_childs_attempt(db_env, tmp_path, pg_dsn,
                                                                 schema, client, receiver):
    from opentelemetry import trace

    from tests.otel import memory_spans

    spans = memory_spans()
    env = exporting(db_env, receiver)
    with MasterProcess(env, tmp_path, "-c", "1", "--poll-interval", "0.1", app=APP) as m, \
            WebProcess(exporting(web_env(pg_dsn, schema), receiver)) as web:
        m.wait_ready(concurrency=1)
        # 1. A Python producer in a span of its own.
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            job = client.enqueue("noop").job
        [produce] = [s for s in spans.get_finished_spans() if s.name == "jobrun.enqueue noop"
                     and s.attributes["jobrun.job_id"] == job.id]
        trace_id = f"{caller.get_span_context().trace_id:032x}"
        run = wait_for(lambda: receiver.find(name="jobrun.run noop", trace_id=trace_id),
                       timeout=30, message="the attempt span exported by the child")[0]
        assert run.service == "jobrun-child"
        assert run.parent_id == f"{produce.context.span_id:016x}"
        assert run.attributes["jobrun.job_id"] == job.id
        assert run.attributes["jobrun.outcome"] == "succeeded"
        assert run.attributes["messaging.destination.name"] == "default"
        assert run.attributes["jobrun.lease_token"] >= 1

        # 2. curl -H 'traceparent: ...' -d '{"task": ...}' .../api/v1/jobs
        header = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"
        posted = httpx.post(web.base + "/api/v1/jobs", json={"task": "boom"},
                            headers={"traceparent": header})
        assert posted.status_code == 201
        request = wait_for(lambda: receiver.find(service="jobrun-web", trace_id=PARENT_TRACE, kind=2),
                           timeout=30, message="the web request's span")[0]
        assert request.name == "POST /api/v1/jobs" and request.parent_id == PARENT_SPAN  # SERVER
        assert request.attributes["http.response.status_code"] == 201
        enqueue = wait_for(lambda: receiver.find(name="jobrun.enqueue boom",
                                                 trace_id=PARENT_TRACE),
                           timeout=30, message="the web's producer span")[0]
        assert descends(receiver, enqueue, request.span_id)  # FastAPI's own spans between
        failed = wait_for(lambda: receiver.find(name="jobrun.run boom", trace_id=PARENT_TRACE),
                          timeout=30, message="the attempt of the posted job")[0]
        assert failed.parent_id == enqueue.span_id
        assert failed.attributes["jobrun.job_id"] == posted.json()["id"]
        assert failed.attributes["jobrun.outcome"] == "failed" and failed.status_code == 2

        # 3. The master: its completion batches as spans linked to the jobs' traces, its job
        # counters as instruments.
        def linked(trace):
            return [s for s in receiver.find(name="jobrun.complete", service="jobrun-master")
                    if trace in s.links]
        done = wait_for(lambda: linked(PARENT_TRACE), timeout=30, message="its completion span")
        assert done[0].attributes["messaging.batch.message_count"] >= 1
        assert wait_for(lambda: linked(trace_id), timeout=30, message="the first job's completion")

        def counted():
            with receiver.lock:
                points = list(receiver.metrics.get("jobrun.jobs", ()))
            return {(a.key, a.value.string_value) for p in points for a in p.attributes} >= {
                ("task", "boom"), ("outcome", "failed")}
        wait_for(counted, timeout=30, message="jobrun.jobs exported by the master")
        assert "jobrun.job.duration" in receiver.metrics


def test_request_ids_in_the_response_the_error_envelope_and_the_access_log(pg_dsn, schema):
    with WebProcess(web_env(pg_dsn, schema)) as web:
        base = web.base + "/api/v1"
        made = httpx.post(base + "/jobs", json={"task": "t"}, headers={"X-Request-ID": "req-1.a:b"})
        assert made.status_code == 201 and made.headers["x-request-id"] == "req-1.a:b"
        bad = httpx.post(base + "/jobs", json={"task": "t", "max_retries": 3},
                         headers={"X-Request-ID": "req-2"})
        assert bad.status_code == 422 and bad.json()["request_id"] == "req-2"
        assert bad.headers["x-request-id"] == "req-2"
        missing = httpx.get(base + "/jobs/999999999")
        rid = missing.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", rid) and missing.json()["request_id"] == rid
        for insane in ("a b", "x" * 129, "<script>"):
            other = httpx.get(base + "/healthz", headers={"X-Request-ID": insane})
            assert re.fullmatch(r"[0-9a-f]{32}", other.headers["x-request-id"])
        wait_for(lambda: "request_id=req-2" in web.output(), timeout=10, message="access line")
        out = web.output()
    lines = {m[1]: m[0] for m in re.finditer(r"^.*web\.request request_id=(\S+).*$", out, re.M)}
    assert "method=POST path=/api/v1/jobs status=201" in lines["req-1.a:b"]
    assert "status=422" in lines["req-2"] and "status=404" in lines[rid]


def test_cors_origins_from_the_settings_never_every_origin(pg_dsn, schema):
    allowed = "http://console.example:8080"
    env = {**web_env(pg_dsn, schema), "JOBRUN_WEB_ALLOW_ORIGINS": allowed}
    with WebProcess(env) as web:
        url = web.base + "/api/v1/jobs"
        ok = httpx.post(url, json={"task": "t"}, headers={"Origin": allowed})
        assert ok.status_code == 201 and ok.headers["access-control-allow-origin"] == allowed
        assert "X-Request-ID" in ok.headers["access-control-expose-headers"]
        preflight = httpx.options(url, headers={
            "Origin": allowed, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "traceparent, x-request-id"})
        assert preflight.status_code == 200
        other = httpx.post(url, json={"task": "t"}, headers={"Origin": "http://other.example"})
        assert other.status_code == 403 and "access-control-allow-origin" not in other.headers
    every = subprocess.run([sys.executable, "-m", "jobrun", "web"], capture_output=True,
                           text=True, timeout=60,
                           env={**web_env(pg_dsn, schema), "JOBRUN_WEB_ALLOW_ORIGINS": "*"})
    assert every.returncode != 0
    assert "JOBRUN_WEB_ALLOW_ORIGINS: '*' (every origin) is refused" in every.stderr
    assert "Traceback" not in every.stderr
