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


def test_another_channel_shares_the_connection_and_wakes_only_its_own(pg_dsn, schema):
    """The scheduler's channel rides on the claimer's LISTEN connection (``also``): one
    listening backend, each notification waking only its channel's subscriber, and both woken
    when the connection comes back."""
    q = for_schema(schema)

    async def scenario() -> tuple[list[str], list[str], int]:
        wakes: list[str] = []
        notifier = Notifier(pg_dsn, q.listen_ready, {"default"}, lambda: wakes.append("jobs"))
        notifier.also(q.listen_schedules, q.schedules_channel, lambda: wakes.append("schedules"))
        notifier.start()
        await wait_for_async(lambda: {"jobs", "schedules"} <= set(wakes), 10,
                             message="both woken at the first connect")
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            def listeners() -> list[int]:
                return [r[0] for r in other.execute(
                    "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%%'"
                    " AND query LIKE %s", [f"%{schema}%"]).fetchall()]

            first = await wait_for_async(lambda: listeners() or None, 10, message="the LISTEN")
            del wakes[:]
            other.execute("SELECT pg_notify(%s, '')", [q.schedules_channel])
            await wait_for_async(lambda: wakes, 10, message="the schedules wake")
            other.execute("SELECT pg_notify(%s, 'default')", [q.channel])
            await wait_for_async(lambda: len(wakes) > 1, 10, message="the jobs wake")
            other.execute("SELECT pg_notify(%s, 'elsewhere')", [q.channel])  # a queue not served
            other.execute("SELECT pg_notify(%s, '')", [q.schedules_channel])
            await wait_for_async(lambda: len(wakes) > 2, 10, message="the second schedules wake")
            seen = list(wakes)
            del wakes[:]
            other.execute("SELECT pg_terminate_backend(%s)", [first[0]])
            await wait_for_async(lambda: {"jobs", "schedules"} <= set(wakes), 20,
                                 message="both woken on the new connection")
            back = list(wakes)
            count = len(await wait_for_async(lambda: (lambda p: p if p and p != first else None)(
                listeners()), 20, message="the new LISTEN connection"))
        await notifier.stop()
        return seen, back, len(first) + count

    seen, back, connections = asyncio.run(scenario())
    assert seen == ["schedules", "jobs", "schedules"]
    assert sorted(set(back)) == ["jobs", "schedules"]
    assert connections == 2  # one before, one after: never two at once
