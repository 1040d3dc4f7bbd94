"""The failover harness itself (tests/failover.py): a commit acknowledged in sync mode is on
the promoted replica, a multi-host DSN finds the new primary, and the pair fails over twice."""

from __future__ import annotations

import threading

import psycopg

from jobrun.testing import wait_for

from tests.failover import FailoverPair


def _primary_of(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
        return conn.info.host


def test_a_commit_acknowledged_in_sync_mode_survives_two_failovers():
    with FailoverPair("sync") as pair:
        first = pair.primary.root
        assert _primary_of(pair.dsn) == str(first)
        with psycopg.connect(pair.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE acked (n int PRIMARY KEY)")
            conn.execute("INSERT INTO acked VALUES (1)")

        took = pair.failover()
        assert took < 60
        assert _primary_of(pair.dsn) == str(pair.b.root)
        with psycopg.connect(pair.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT array_agg(n) FROM acked").fetchone()[0] == [1]
            conn.execute("INSERT INTO acked VALUES (2)")

        pair.rebuild()
        pair.failover()
        assert _primary_of(pair.dsn) == str(first)
        with psycopg.connect(pair.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT array_agg(n ORDER BY n) FROM acked").fetchone()[0] == [1, 2]


def test_a_sync_primary_waits_for_its_replica():
    """The sync mode is real: with the replica gone, a commit waits for it (until cancelled)."""
    with FailoverPair("sync") as pair:
        with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE waits (n int)")
        pair.replica.kill()
        writer = psycopg.connect(pair.primary.dsn, autocommit=True)
        done = threading.Event()
        thread = threading.Thread(target=lambda: (writer.execute("INSERT INTO waits VALUES (1)"),
                                                  done.set()))
        thread.start()
        with psycopg.connect(pair.primary.dsn, autocommit=True) as conn:
            wait_for(lambda: conn.execute("SELECT count(*) FROM pg_stat_activity"
                                          " WHERE wait_event = 'SyncRep' AND pid = %s",
                                          (writer.info.backend_pid,)).fetchone()[0] == 1,
                     timeout=20, message="the commit to wait for the replica")
            assert not done.is_set()
            conn.execute("SELECT pg_cancel_backend(%s)", (writer.info.backend_pid,))
        thread.join(timeout=20)
        writer.close()
        assert done.is_set()


def test_async_mode_promotes_a_replica_that_may_lag():
    with FailoverPair("async") as pair:
        with psycopg.connect(pair.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (n int)")
        pair.caught_up()
        pair.failover()
        with psycopg.connect(pair.dsn, autocommit=True) as conn:
            assert conn.info.host == str(pair.b.root)
            assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 0


def test_the_connector_sees_a_promoted_replica_as_a_new_primary_and_a_restart_as_the_same():
    """What makes a master change its owner id (Master.change_owner): a new connection that
    reaches another primary (a promoted replica writes a new timeline), announced once, before
    the connection is handed out; a restart of the same primary is no new server."""
    import asyncio

    from jobrun.sql import for_schema
    from jobrun.store.connector import Connector
    from tests.faults.load import restart_immediate

    seen: list[tuple[str, str]] = []

    async def connect_once(connector: Connector) -> str:
        conn = await connector.connect()
        host = conn.info.host
        await conn.close()
        return host

    with FailoverPair("async") as pair:
        connector = Connector(pair.hosts_dsn())  # read-write added by the connector
        connector.watch_server(for_schema("jobrun").server_identity,
                               lambda old, new: seen.append((old, new)))
        assert asyncio.run(connect_once(connector)) == str(pair.a.root)
        first = connector.server
        restart_immediate(pair.a)
        assert asyncio.run(connect_once(connector)) == str(pair.a.root)
        assert seen == [] and connector.server == first
        pair.failover()
        assert asyncio.run(connect_once(connector)) == str(pair.b.root)
        assert seen == [(first, connector.server)] and connector.server != first
        assert connector.server.split(":")[0] == first.split(":")[0]  # same cluster, new timeline
        asyncio.run(connect_once(connector))
        assert len(seen) == 1
