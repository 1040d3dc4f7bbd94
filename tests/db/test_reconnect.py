"""The connection seam against a real PostgreSQL: two parts of a master sharing one Connector
(the completer on the event loop, the heartbeater's blocking connection) have their backends
terminated; each notices, reconnects through the seam and goes on, and the one health state
saw the failures and the recovery."""

from __future__ import annotations

import asyncio
import time

import psycopg
from psycopg.rows import dict_row

from jobrun.sql import for_schema
from jobrun.store.connector import Connector
from jobrun.testing import wait_for, wait_for_async
from jobrun.worker.completer import Completer, Completion
from jobrun.worker.heartbeat import Heartbeater, Lease
from jobrun.worker.registry import Registry

from tests.dbview import lease


class Child:
    def __init__(self) -> None:
        self.job = None
        self.signals: list[int] = []

    def signal(self, signum: int) -> None:
        self.signals.append(signum)


def terminate(conn: psycopg.Connection, pid: int) -> None:
    """End the backend ``pid`` and wait until it is gone."""
    conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    wait_for(lambda: conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE pid = %s",
                                  [pid]).fetchone()["n"] == 0, 10, message=f"backend {pid} gone")


def test_parts_whose_backends_are_terminated_reconnect_through_the_seam(pg_dsn, schema, client):
    ids = [client.enqueue("noop").job.id for _ in range(3)]
    q = for_schema(schema)
    owner = "test:1:seam"
    connector = Connector(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as other:
        token = {r["id"]: r["lease_token"] for r in lease(other, schema, 3, owner)}
        held = Lease(ids[2], token[ids[2]], Child(), time.monotonic())
        hb = Heartbeater(connector, q, owner, 60.0, leases=lambda: [held],
                         loop_alive=lambda period: True, on_fence=lambda lease, why: None)
        hb.tick(hb.clock())
        assert hb.beats == 1 and hb.failures == 0
        before = hb._conn.info.backend_pid
        terminate(other, before)
        hb.tick(hb.clock())  # the renewal fails, and is retried at once on a new connection
        assert hb.beats == 2 and hb.failures == 1 and held.child.signals == []
        assert hb._conn.info.backend_pid != before
        assert connector.health.report().failures == 0

        async def scenario() -> list[int]:
            during: list[int] = []  # the health's consecutive failures at each error
            completer = Completer(connector, q, owner, "host", 1, on_db_error=lambda: during.append(
                connector.health.report().failures))

            def done(job_id: int) -> Completion:
                return Completion(id=job_id, token=token[job_id], status="succeeded",
                                  outcome="succeeded", result="null")

            completer.start()
            completer.submit(done(ids[0]))
            assert await completer.drain(20)
            first = completer._conn.info.backend_pid
            terminate(other, first)
            completer.submit(done(ids[1]))
            assert await completer.drain(30)
            assert completer._conn.info.backend_pid != first
            await wait_for_async(lambda: connector.health.report().failures == 0, 5,
                                 message="the health recovered")
            await completer.stop()
            return during

        during = asyncio.run(scenario())
        hb._session.close()
    assert during and during[0] == 1
    report = connector.health.report()
    assert report.failures == 0 and report.seconds_since_ok < 5
    assert report.error  # the last error: the completer's lost connection
    assert [client.get(i).status for i in ids] == ["succeeded", "succeeded", "leased"]


def test_the_registry_row_carries_the_database_health(pg_dsn, schema):
    """The registry writes the master's health into its row: the failures other parts reported
    before its refresh, then none once its own round trips went through."""
    connector = Connector(pg_dsn)
    connector.failed(psycopg.OperationalError("connection to postgresql://u:Pw7x@h/d refused"))
    row = {"owner": "h:1:seam", "host": "h", "pid": 1, "app": None, "queues": ["default"],
           "concurrency": 1, "slots": 1, "busy": 0, "version": "test", "inflight": [], "tasks": [],
           "held": "{}"}

    def stored() -> dict | None:
        with psycopg.connect(pg_dsn, row_factory=dict_row) as conn:
            return conn.execute(f'SELECT db_failures, db_error, db_host FROM "{schema}".workers'
                                ).fetchone()

    async def scenario() -> tuple[dict, dict]:
        registry = Registry(connector, for_schema(schema), row=lambda: dict(row),
                            on_depth=lambda rows: None, interval=0.05)
        registry.start()
        first = await wait_for_async(stored, 10, message="the registry row")
        later = await wait_for_async(lambda: (lambda r: r if r and r["db_failures"] == 0
                                              else None)(stored()), 10, message="a refresh")
        await registry.stop()
        return first, later

    first, later = asyncio.run(scenario())
    assert first["db_failures"] == 1 and "refused" in first["db_error"]
    assert "Pw7x" not in first["db_error"]
    assert later["db_error"] == first["db_error"]  # the last error, kept after the recovery
    # and the host its connection reached (a Unix socket's folder, here)
    assert later["db_host"] == f"{psycopg.conninfo.conninfo_to_dict(pg_dsn)['host']}:5432"
