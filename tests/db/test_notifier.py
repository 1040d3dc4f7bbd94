"""The notifier against a real PostgreSQL: a notification wakes the claimer, and a dropped
LISTEN connection is noticed, replaced, and wakes it again."""

from __future__ import annotations

import asyncio

import psycopg

from jobrun.sql import for_schema
from jobrun.testing import wait_for_async
from jobrun.worker.notifier import Notifier


def test_a_notification_wakes_and_a_dropped_connection_comes_back(pg_dsn, schema):
    channel = f"{schema}_ready"

    async def scenario() -> tuple[int, int, int, int]:
        wakes: list[str] = []
        errors: list[int] = []
        notifier = Notifier(pg_dsn, for_schema(schema).listen_ready, {"emails", "default"},
                            lambda: wakes.append("wake"), on_db_error=lambda: errors.append(1))
        notifier.start()
        await wait_for_async(lambda: wakes, 10, message="the wake of the first LISTEN")
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            def listener() -> int | None:
                row = other.execute("SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%%'"
                                    " AND query LIKE %s", [f"%{channel}%"]).fetchone()
                return row[0] if row else None

            first = await wait_for_async(listener, 10, message="the LISTEN connection")
            at_start = len(wakes)
            other.execute("SELECT pg_notify(%s, 'emails')", [channel])
            await wait_for_async(lambda: len(wakes) > at_start, 10, message="a wake")
            for_emails = len(wakes) - at_start
            other.execute("SELECT pg_terminate_backend(%s)", [first])
            await wait_for_async(lambda: errors, 10, message="the lost connection noticed")
            second = await wait_for_async(lambda: (lambda p: p if p and p != first else None)(
                listener()), 20, message="a new LISTEN connection")
            before = len(wakes)
            other.execute("SELECT pg_notify(%s, 'default')", [channel])
            await wait_for_async(lambda: len(wakes) > before, 10, message="a wake on the new one")
        await notifier.stop()
        return for_emails, len(errors), int(second != first), len(wakes) - before

    assert asyncio.run(scenario()) == (1, 1, 1, 1)
