"""jobrun.tracing and the web's request ids, in-process with the SDK's in-memory exporters:
the producer span and the traceparent it stores, the attempt and completion spans, W3C
traceparent checks, sane request ids, and the job metrics mirrored as OpenTelemetry
instruments."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from jobrun import tracing  # noqa: E402
from jobrun.web.access import request_id  # noqa: E402
from tests.otel import memory_spans  # noqa: E402

pytestmark = pytest.mark.unit
TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def spans():
    exporter = memory_spans()
    exporter.clear()
    return exporter


@tracing.producer("enqueue")
def fake_enqueue(q, limit, task, payload=None, *, queue="default", traceparent=None):
    """An operation as jobrun.ops writes them: yields a step, gets rows, returns the job."""
    rows = yield ("insert", traceparent)
    return SimpleNamespace(job=SimpleNamespace(id=rows[0]), created=True)


def drive(op, rows):
    step = next(op)
    try:
        op.send(rows)
    except StopIteration as stop:
        return step, stop.value
    raise AssertionError("the operation did not end")


def hex_ids(context):
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_a_producer_span_is_a_child_of_the_current_span_and_its_traceparent_is_stored(spans):
    with trace.get_tracer("test").start_as_current_span("caller") as caller:
        (_, stored), result = drive(fake_enqueue(None, 0, "email.send", queue="mail"), [42])
    assert result.job.id == 42
    [produce] = [s for s in spans.get_finished_spans() if s.name == "jobrun.enqueue email.send"]
    assert produce.kind == SpanKind.PRODUCER
    assert produce.parent.span_id == caller.get_span_context().span_id
    assert stored.split("-")[:3] == ["00", *hex_ids(produce.context)]
    assert produce.attributes["messaging.system"] == "jobrun"
    assert produce.attributes["messaging.destination.name"] == "mail"
    assert produce.attributes["messaging.operation.type"] == "send"
    assert produce.attributes["messaging.message.id"] == "42"


def test_a_given_traceparent_is_the_parent_outside_any_span(spans):
    (_, stored), _ = drive(fake_enqueue(None, 0, "t", traceparent=TP), [1])
    [produce] = spans.get_finished_spans()
    assert hex_ids(produce.context)[0] == "0af7651916cd43dd8448eb211c80319c"
    assert f"{produce.parent.span_id:016x}" == "b7ad6b7169203331"
    assert stored.split("-")[2] == hex_ids(produce.context)[1]


def test_a_failed_enqueue_ends_its_span_with_an_error(spans):
    op = fake_enqueue(None, 0, "t")
    next(op)
    with pytest.raises(ValueError):
        op.throw(ValueError("undeclared queue"))
    [produce] = spans.get_finished_spans()
    assert produce.status.status_code == StatusCode.ERROR


def test_the_attempt_span_carries_the_job_and_its_outcome(spans):
    job = SimpleNamespace(id=7, task="t", queue="q", attempt=2, token=99)
    with tracing.attempt_span(job, TP) as finish:
        finish({"outcome": "failed", "error": "ValueError: no", "traceback": "Traceback..."})
    with tracing.attempt_span(job, None) as finish:  # untraced: no span
        finish({"outcome": "succeeded"})
    [run] = spans.get_finished_spans()
    assert run.name == "jobrun.run t" and run.kind == SpanKind.CONSUMER
    assert hex_ids(run.context)[0] == "0af7651916cd43dd8448eb211c80319c"
    attrs = run.attributes
    assert (attrs["jobrun.job_id"], attrs["jobrun.attempt"], attrs["jobrun.lease_token"],
            attrs["jobrun.outcome"], attrs["messaging.destination.name"]) == (7, 2, 99, "failed", "q")
    assert run.status.status_code == StatusCode.ERROR
    assert run.events[0].attributes["exception.message"] == "ValueError: no"


def test_a_completion_batch_is_one_span_with_its_size_linked_to_its_jobs_traces(spans):
    batch = [SimpleNamespace(traceparent=TP if n % 4 == 0 else None) for n in range(12)]
    with tracing.completion_span(batch):
        pass
    [done] = spans.get_finished_spans()
    assert done.name == "jobrun.complete"
    assert done.attributes["messaging.batch.message_count"] == 12
    assert len(done.links) == 3
    assert {f"{link.context.trace_id:032x}" for link in done.links} == {TP.split("-")[1]}


@pytest.mark.parametrize("text", [
    None, "", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", TP + "x" * 200])
def test_malformed_traceparents_are_dropped(text):
    assert tracing.valid_traceparent(text) is None


@given(st.text(max_size=80))
def test_a_kept_traceparent_is_always_well_formed(text):
    kept = tracing.valid_traceparent(text)
    assert kept is None or tracing.TRACEPARENT.fullmatch(kept)
    assert tracing.valid_traceparent(TP) == TP


@given(st.text(max_size=200))
def test_a_request_id_is_the_callers_when_sane_else_a_new_one(given_id):
    made = request_id(given_id)
    assert 1 <= len(made) <= 128 and all(c.isalnum() or c in "._:-" for c in made)
    assert made.isascii()
    sane = 1 <= len(given_id) <= 128 and given_id.isascii() and all(
        c.isalnum() or c in "._:-" for c in given_id)
    assert (made == given_id) == sane


@functools.cache
def metric_reader():
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader


def test_the_job_metrics_are_mirrored_as_instruments_with_an_sdk():
    from jobrun.worker.metrics import Metrics

    reader = metric_reader()
    m = Metrics()
    m.jobs.labels("default", "t", "succeeded").inc()
    m.jobs.labels("default", "t", "succeeded").inc()
    m.dead.labels("default", "t").inc()
    m.duration.labels("default", "t").observe(0.25)
    assert b'jobrun_jobs_total{outcome="succeeded",queue="default",task="t"} 2.0' in m.render()
    points = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points[metric.name] = metric.data.data_points
    [jobs] = points["jobrun.jobs"]
    assert jobs.value == 2 and dict(jobs.attributes) == {"queue": "default", "task": "t",
                                                         "outcome": "succeeded"}
    assert points["jobrun.jobs.dead"][0].value == 1
    [took] = points["jobrun.job.duration"]
    assert took.count == 1 and took.sum == 0.25



def test_every_other_family_is_observed_at_export():
    """Counters, gauges and histograms other than the job families reach OpenTelemetry as
    observable instruments, read at each export with their labels as attributes (on a meter
    provider of the test's own: the process's global one already observes another Metrics)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from jobrun.worker.metrics import Metrics
    from jobrun.worker.otelmetrics import observe_the_rest

    m = Metrics()
    reader = InMemoryMetricReader()
    teed = {"jobrun_jobs", "jobrun_jobs_dead", "jobrun_job_duration_seconds"}
    names = observe_the_rest(MeterProvider(metric_readers=[reader]).get_meter("t"), m, teed)
    families = {f._name for f in vars(m).values() if hasattr(f, "_type")} - teed
    assert len(families) > 20
    assert {n.split(".")[1] for n in names} == {f.removeprefix("jobrun_") for f in families}
    m.child_exits.labels("crash").inc(3)
    m.children.labels("busy").set(2)
    m.claim_batch.observe(8)
    m.claim_batch.observe(4)
    points: dict[str, list] = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    assert 3 in [p.value for p in points["jobrun.child_exits"]
                 if dict(p.attributes) == {"reason": "crash"}]
    assert ("busy", 2) in {(dict(p.attributes).get("state"), p.value)
                           for p in points["jobrun.children"]}
    assert 2 in [p.value for p in points["jobrun.claim_batch_size.count"]]
    assert 12 in [p.value for p in points["jobrun.claim_batch_size.sum"]]
    for family in ("jobrun_lease_fenced", "jobrun_generation", "jobrun_schedule_fire_lag_seconds",
                   "jobrun_build_info", "jobrun_reload_failures"):
        name = "jobrun." + family.removeprefix("jobrun_")
        assert name in points or name + ".count" in points, family


def test_the_web_makes_its_own_server_span_where_none_is_current(spans, caplog):
    """Without FastAPI's native telemetry (older FastAPI) the access middleware makes the
    SERVER span, a child of the request's traceparent, current while the app runs."""
    import asyncio
    import logging

    from jobrun.web.access import Access

    seen = {}

    async def app(scope, receive, send):
        seen["span"] = trace.get_current_span().get_span_context()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "DELETE", "path": "/api/v1/jobs/1",
             "headers": [(b"traceparent", TP.encode()), (b"x-request-id", b"r-1")]}
    with caplog.at_level(logging.INFO, logger="jobrun.web.access"):
        asyncio.run(Access(app)(scope, None, send))
    [server] = spans.get_finished_spans()
    assert server.kind == SpanKind.SERVER and server.context.span_id == seen["span"].span_id
    assert f"{server.parent.span_id:016x}" == "b7ad6b7169203331"
    assert server.attributes["http.response.status_code"] == 204
    assert (b"x-request-id", b"r-1") in sent[0]["headers"]
    [line] = [r for r in caplog.records if r.getMessage() == "web.request"]
    assert line.jobrun_fields["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert line.jobrun_fields["status"] == 204 and line.jobrun_fields["request_id"] == "r-1"


def test_otel_enabled_without_the_exporter_says_what_to_install(monkeypatch):
    from jobrun.errors import InvalidInput

    assert tracing.configure("jobrun-test", environ={}) is False  # off: nothing set up
    monkeypatch.setitem(__import__("sys").modules,
                        "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(InvalidInput) as info:
        tracing.configure("jobrun-test", environ={"OTEL_ENABLED": "true"})
    assert "pip install 'jobrun[otel-export]'" in str(info.value)
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in str(info.value)
