"""Metrics (checked with Prometheus' own text parser), health endpoints, the worker registry,
per-attempt logs, structured logs and W3C trace context."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql
from psycopg.rows import dict_row

import jobrun
from jobrun.testing import wait_for
from tests.masterproc import ROOT, MasterProcess, metrics_url
from tests.masterproc import http_get as get

APP = "tests.apps.obsapp"


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def settled(conn, schema, n):
    row = conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE status IN ('succeeded','dead')")
                       .format(sql.Identifier(schema, "jobs"))).fetchone()
    return row["n"] >= n


@pytest.fixture
def conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        yield c


def test_metrics_health_and_registry(db_env, tmp_path, client, conn, schema):
    with MasterProcess(db_env, tmp_path, "-c", "2", "--poll-interval", "0.1",
                       "--metrics-addr", "127.0.0.1:0", app=APP) as m:
        m.wait_ready(concurrency=2)
        url = metrics_url(m)
        for _ in range(5):
            client.enqueue("noop")
        client.enqueue("boom")
        client.enqueue("noop", delay="1h")
        wait_for(lambda: settled(conn, schema, 6), timeout=20, message="jobs settled")

        def scraped():
            status, text = get(url + "/metrics")
            values = samples(text)
            ok = values.get(("jobrun_jobs_total", (("outcome", "succeeded"), ("queue", "default"),
                                                   ("task", "noop")))) == 5
            depth = values.get(("jobrun_queue_depth", (("queue", "default"), ("status", "scheduled"))))
            # The children gauge follows the children's own reports: wait for both to be idle.
            idle = values.get(("jobrun_children", (("state", "idle"),)))
            return (status, values) if ok and depth == 1 and idle == 2 else None
        status, values = wait_for(scraped, timeout=15, message="metrics to show the jobs")
        assert status == 200
        assert values[("jobrun_jobs_total", (("outcome", "failed"), ("queue", "default"),
                                             ("task", "boom")))] == 1
        assert values[("jobrun_job_duration_seconds_count", (("queue", "default"), ("task", "noop")))] == 5
        assert values[("jobrun_job_wait_seconds_count", (("queue", "default"),))] == 6
        assert values[("jobrun_children", (("state", "idle"),))] == 2
        assert values[("jobrun_claim_batch_size_count", ())] >= 1
        assert values[("jobrun_lease_fenced_total", ())] == 0
        build = [k for k in values if k[0] == "jobrun_build_info"]
        assert build and values[build[0]] == 1
        # Bounded labels: no job id anywhere in a label value.
        assert not any(k[0].startswith("jobrun_") and any(lbl == "job" or lbl == "id" for lbl, _ in k[1])
                       for k in values)
        status, body = get(url + "/healthz")
        report = json.loads(body)
        assert status == 200 and report["ok"] and report["children"] == 2
        assert get(url + "/readyz")[0] == 200
        assert get(url + "/nope")[0] == 404

        row = wait_for(lambda: conn.execute(sql.SQL("SELECT * FROM {} WHERE pid = %s").format(
            sql.Identifier(schema, "workers")), [m.pid]).fetchone(), timeout=10, message="registry row")
        assert row["concurrency"] == 2 and row["queues"] == ["default"] and row["app"] == APP
        assert row["owner"].startswith(f"{socket.gethostname()}:{m.pid}:")
        assert {"noop", "boom", "chatty"} <= set(row["tasks"])  # what the app declares

        m.signal(15)
        assert m.wait() == 0
        gone = conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE pid = %s").format(
            sql.Identifier(schema, "workers")), [m.pid]).fetchone()
        assert gone["n"] == 0


def test_run_times_are_the_childs_own_when_results_come_back_together(
        db_env, tmp_path, client, conn, schema):
    """A child handed several short jobs at once sends their results together; the duration
    histogram still gets each job's own run time (~7 ms here), not the time between results
    (the first of a group looked long, the others took ~0)."""
    with MasterProcess(db_env, tmp_path, "-c", "1", "--poll-interval", "0.1",
                       "--metrics-addr", "127.0.0.1:0", app=APP) as m:
        m.wait_ready(concurrency=1)
        url = metrics_url(m)
        client.enqueue("short")  # its run time makes the next claim hand jobs ahead
        wait_for(lambda: settled(conn, schema, 1), timeout=20, message="the first job")
        client.enqueue_many([("short", None)] * 40)
        wait_for(lambda: settled(conn, schema, 41), timeout=30, message="the jobs settled")
        labels = (("queue", "default"), ("task", "short"))

        def histogram():
            values = samples(get(url + "/metrics")[1])
            return values if values.get(("jobrun_job_duration_seconds_count", labels)) == 41 else None
        values = wait_for(histogram, timeout=15, message="the durations observed")
        under_5ms = values[("jobrun_job_duration_seconds_bucket", (("le", "0.005"),) + labels)]
        batches = values[("jobrun_claim_batch_size_count", ())]
        m.signal(15)
        assert m.wait() == 0
    assert batches < 41  # jobs were handed ahead, so results could come together
    assert under_5ms == 0


def test_stale_registry_rows_are_purged(db_env, tmp_path, conn, schema):
    workers = sql.Identifier(schema, "workers")
    conn.execute(sql.SQL("INSERT INTO {} (owner, host, pid, queues, concurrency, last_seen)"
                         " VALUES ('ghost:1:x', 'ghost', 1, ARRAY['default'], 4, now() - interval '1 hour')")
                 .format(workers))
    with MasterProcess(db_env, tmp_path, "-c", "1", "--metrics-addr", "off", app=APP) as m:
        m.wait_ready(concurrency=1)
        wait_for(lambda: conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE owner = 'ghost:1:x'")
                                      .format(workers)).fetchone()["n"] == 0,
                 timeout=15, message="the stale row to be purged")


def test_non_loopback_metrics_address_is_refused(db_env):
    env = {**db_env, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "-A", APP,
                           "--metrics-addr", "0.0.0.0:9110"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "not a loopback address" in proc.stderr and "--metrics-allow-remote" in proc.stderr


def test_attempt_logs_are_captured_bounded_and_shown(db_env, tmp_path, client, conn, schema):
    with MasterProcess(db_env, tmp_path, "-c", "1", "--poll-interval", "0.1",
                       "--metrics-addr", "off", "--log-format", "json", app=APP) as m:
        m.wait_ready(concurrency=1)
        small = client.enqueue("chatty", {"lines": 2}).job.id
        big = client.enqueue("chatty", {"lines": 5000}).job.id
        failed = client.enqueue("boom").job.id
        wait_for(lambda: settled(conn, schema, 3), timeout=30, message="jobs settled")
        for line in m.stderr().splitlines():
            if line.startswith("{"):
                doc = json.loads(line)  # every structured line is one JSON object
                assert "event" in doc and "level" in doc and "ts" in doc
        assert '"event": "master.ready"' in m.stderr()
    logs = {r["job_id"]: r["log"] for r in conn.execute(
        sql.SQL("SELECT job_id, log FROM {}").format(sql.Identifier(schema, "job_attempts")))}
    assert f"line 0 of job {small}" in logs[small] and f"line 1 of job {small}" in logs[small]
    assert f"a warning from job {small}" in logs[small]
    assert f"printed by job {small}" in logs[small]
    assert len(logs[big].encode()) < 70 * 1024 and "more bytes of log dropped" in logs[big]
    assert "about to fail" in logs[failed]
    env = {**db_env}
    shown = subprocess.run([sys.executable, "-m", "jobrun.admin.cli", "logs", str(small)], env=env,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and f"printed by job {small}" in shown.stdout


# --- trace context --------------------------------------------------------------------------

otel = pytest.importorskip("opentelemetry.sdk.trace")


@pytest.fixture
def spans():
    from tests.otel import memory_spans

    exporter = memory_spans()
    exporter.clear()
    return exporter


def test_each_enqueue_is_a_producer_span_whose_traceparent_the_attempts_continue(client, spans):
    import socket as sockets

    from opentelemetry import trace

    from jobrun.child.runtime import ChildRuntime
    from tests.apps.obsapp import app

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("produce") as parent:
        job = client.enqueue("boom").job
        bulk = client.enqueue_many([("noop", None)] * 2)
    untraced = client.enqueue("noop").job  # outside a span: a trace of its own
    ctx = parent.get_span_context()
    producers = {s.name: s for s in spans.get_finished_spans()
                 if s.kind == trace.SpanKind.PRODUCER}
    one, many = producers["jobrun.enqueue boom"], producers["jobrun.enqueue_many"]
    assert one.parent.span_id == many.parent.span_id == ctx.span_id
    assert one.attributes["jobrun.job_id"] == job.id
    assert many.attributes["messaging.batch.message_count"] == 2
    stored = client.get(job.id).traceparent
    version, trace_id, span_id, _flags = stored.split("-")
    spans.clear()

    async def produce_async():
        async with jobrun.AsyncClient(client.dsn, schema=client.settings.schema) as ac:
            with tracer.start_as_current_span("produce async") as caller:
                made = await ac.enqueue("noop")
        return made.job, caller.get_span_context()

    async_job, async_ctx = asyncio.run(produce_async())
    [async_one] = [s for s in spans.get_finished_spans() if s.name == "jobrun.enqueue noop"]
    assert async_one.parent.span_id == async_ctx.span_id
    assert client.get(async_job.id).traceparent.split("-")[2] == f"{async_one.context.span_id:016x}"
    assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{one.context.span_id:016x}")
    assert {client.get(i).traceparent.split("-")[2] for i, _ in bulk} == {f"{many.context.span_id:016x}"}
    alone = client.get(untraced.id).traceparent
    assert alone is not None and alone.split("-")[1] != trace_id

    ours, theirs = sockets.socketpair()
    try:
        runtime = ChildRuntime(app, ours, 1)
        spans.clear()
        frame = {"id": job.id, "token": 1, "task": "boom", "queue": "default", "attempt": 1,
                 "max_attempts": 2, "payload": None, "traceparent": stored}
        first = runtime.run(frame)
        second = runtime.run({**frame, "token": 2, "attempt": 2})
        runtime.run({**frame, "token": 3, "traceparent": None})  # untraced: no span
    finally:
        ours.close()
        theirs.close()
    assert first["outcome"] == second["outcome"] == "failed"
    runs = [s for s in spans.get_finished_spans() if s.name == "jobrun.run boom"]
    assert len(runs) == 2
    for span in runs:
        assert span.context.trace_id == ctx.trace_id
        assert span.parent.span_id == one.context.span_id  # children of the producer: siblings
        assert span.attributes["jobrun.job_id"] == job.id
        assert span.attributes["jobrun.outcome"] == "failed"
        assert not span.status.is_ok
    assert runs[0].attributes["jobrun.attempt"] == 1 and runs[1].attributes["jobrun.attempt"] == 2
    assert [r.attributes["jobrun.lease_token"] for r in runs] == [1, 2]
