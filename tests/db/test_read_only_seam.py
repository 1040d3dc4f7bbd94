"""A connection refused read-only is replaced by the seam (jobrun/store/connector.py): a
statement refused with SQLSTATE 25006 (a replica, or a primary demoted while the connection
was open) makes every connection opened before it stale; each is closed and replaced at its
next use, logged once (db.read_only, with its host), and the health report names the host."""

from __future__ import annotations

import asyncio
import logging

import psycopg
import pytest

from jobrun.store.connector import HEARTBEATS, Connector


def _refused(conn) -> BaseException:
    conn.execute("SET default_transaction_read_only = on")
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as caught:
        conn.execute("CREATE TABLE nowhere (n int)")
    return caught.value


def test_a_session_replaces_a_connection_refused_read_only(pg_dsn, caplog):
    caplog.set_level(logging.WARNING, logger="jobrun.db")

    async def scenario():
        connector = Connector(pg_dsn)
        session, other = connector.session(), connector.session()
        first, bystander = await session.get(), await other.get()
        try:
            cur = first.cursor()
            await cur.execute("SET default_transaction_read_only = on")
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction) as caught:
                await cur.execute("CREATE TABLE nowhere (n int)")
            connector.failed(caught.value)
            second = await session.get()
            assert second is not first and first.closed
            await second.execute("CREATE TEMP TABLE somewhere (n int)")  # writable again
            assert await session.get() is second  # opened after the refusal: kept
            replaced = await other.get()  # opened before it: replaced as well
            assert replaced is not bystander and bystander.closed
            return connector.health.report()
        finally:
            await session.close()
            await other.close()

    report = asyncio.run(scenario())
    logged = [r.jobrun_fields for r in caplog.records if r.getMessage() == "db.read_only"]
    assert len(logged) == 2  # once per connection
    assert report.host is not None and logged[0]["host"] == report.host
    assert report.as_dict()["db_host"] == report.host


def test_reconnect_and_the_heartbeats_session_replace_it_too(pg_dsn):
    async def claimer_side(connector):
        conn = await connector.connect()
        cur = conn.cursor()
        await cur.execute("SET default_transaction_read_only = on")
        try:
            await cur.execute("CREATE TABLE nowhere (n int)")
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            connector.failed(exc)
        again = await connector.reconnect(conn)
        assert again is not conn and conn.closed
        await again.close()

    connector = Connector(pg_dsn)
    sync = connector.sync_session(HEARTBEATS)
    held = sync.get()
    asyncio.run(claimer_side(connector))
    assert sync.get() is not held and held.closed
    current = sync.get()
    connector.failed(_refused(current))
    assert not sync.usable  # the heartbeater's test: drop it and retry at once
    sync.drop()
    assert current.closed and sync.get() is not current
    sync.close()
