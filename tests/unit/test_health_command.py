"""`jobrun health` against a real metrics server whose /healthz reports the master's database
health (store.connector.DbHealth): the readiness decides the exit code, the database line
says when the database was last reached and, while it fails, how often and why."""

from __future__ import annotations

import asyncio
import threading

import psycopg
from typer.testing import CliRunner

from jobrun.admin import cli
from jobrun.admin.ops_cli import database_line, unserved_line
from jobrun.store.connector import DbHealth
from jobrun.worker.metrics import HttpServer, Metrics


def run_health(health: DbHealth, ready: bool,
               metrics: Metrics | None = None) -> tuple[int, str, str]:
    def report() -> dict:
        database = health.report()
        ok = database.failures == 0
        return {"ok": ok, "database_ok": ok, **database.as_dict(), "children": 1}

    loop = asyncio.new_event_loop()
    srv = HttpServer("127.0.0.1", 0, metrics or Metrics(), health=report, ready=lambda: ready)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> None:
        srv.start()
        await srv.started()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        addr = "%s:%d" % srv.bound[:2]
        done = CliRunner().invoke(cli.app, ["health", "--addr", addr])
        return done.exit_code, done.stdout, done.stderr
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_health_says_how_the_database_fares():
    now = [50.0]
    health = DbHealth(clock=lambda: now[0], dsn="postgresql://u:Pw9secret@db/x")
    code, out, _ = run_health(health, ready=True)
    assert code == 0 and "ready" in out and "database: ok, last reached 0.0 s ago" in out
    now[0] += 12.5
    health.failed(psycopg.OperationalError("connection to postgresql://u:Pw9secret@db/x refused"))
    health.failed(psycopg.OperationalError("connection to postgresql://u:Pw9secret@db/x refused"))
    code, _, err = run_health(health, ready=False)
    assert code == 1 and "not ready (503)" in err
    assert "database: NOT reached recently, last reached 12.5 s ago, 2 failures in a row" in err
    assert "refused" in err and "Pw9secret" not in err


def test_the_database_line_of_an_older_report_or_none():
    assert database_line({"ok": True}) is None  # a master without the database fields
    assert database_line({"seconds_since_db": 1.25, "database_ok": True}) == \
        "database: ok, last reached 1.2 s ago"
    assert database_line({"seconds_since_db": 3, "database_ok": True, "db_failures": 1,
                          "db_error": "boom"}) == \
        "database: ok, last reached 3.0 s ago, 1 failure in a row, the last: boom"


def test_the_database_line_names_the_host_the_master_is_on():
    """After a failover, which host each master follows (store.connector.DbHealth)."""
    assert database_line({"seconds_since_db": 0.5, "database_ok": True,
                          "db_host": "db-b.internal:5432"}) == \
        "database: ok, last reached 0.5 s ago on db-b.internal:5432"


def test_health_names_the_queues_no_live_master_serves():
    """/healthz carries what the master's last depth count found (Metrics.set_depth): queues
    holding queued jobs that no live master serves; `jobrun health` names them, ready or not."""
    metrics = Metrics()
    row = {"concurrency": None, "rate": None, "rate_period_seconds": None, "key_concurrency": 1,
           "leased": 0}
    metrics.set_depth([{**row, "queue": "default", "queued": 3, "scheduled": 0, "masters": 1},
                       {**row, "queue": "emails", "queued": 2, "scheduled": 1, "masters": 0},
                       {**row, "queue": "idle", "queued": 0, "scheduled": 0, "masters": 0}])
    assert metrics.unserved == {"emails": 3}
    assert unserved_line({"unserved_queues": metrics.unserved}) == (
        "no live master serves: emails (3 queued); their jobs wait until one runs with -Q")
    assert unserved_line({"unserved_queues": {}}) is None and unserved_line({}) is None
    code, out, _ = run_health(DbHealth(), ready=True, metrics=metrics)
    assert code == 0 and "no live master serves: emails (3 queued)" in out


def test_the_depth_counts_waiting_jobs_and_running_workflows():
    """The depth statement's waiting count and running workflows become gauges (Metrics.set_depth)."""
    metrics = Metrics()
    row = {"concurrency": None, "rate": None, "rate_period_seconds": None, "key_concurrency": 1,
           "leased": 0, "queued": 1, "scheduled": 0, "masters": 1}
    metrics.set_depth([{**row, "queue": "default", "waiting": 4, "workflows_running": 2}])
    text = metrics.render().decode()
    assert 'jobrun_queue_depth{queue="default",status="waiting"} 4.0' in text
    assert "jobrun_workflows_running 2.0" in text
    metrics.set_depth([])
    assert "jobrun_workflows_running 0.0" in metrics.render().decode()
