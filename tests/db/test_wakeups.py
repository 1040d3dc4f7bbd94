"""The long polls' wake-ups (jobrun.web.wakeups) on a real PostgreSQL: a notification on the
ready channel wakes the claims waiting on its queue and no other, one LISTEN connection
serves every waiter, and it is open only while someone waits."""

from __future__ import annotations

import asyncio

import psycopg

from jobrun.sql import for_schema
from jobrun.testing import wait_for_async
from jobrun.web.wakeups import Wakeups


def listeners(conn, channel: str) -> int:
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                        [f'LISTEN "{channel}"']).fetchone()[0]


def test_a_notification_wakes_the_waiters_of_its_queue(pg_dsn, schema):
    q = for_schema(schema)

    async def scenario():
        wakeups = Wakeups(pg_dsn, q.listen_ready)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            try:
                with wakeups.waiter(["mail"]) as mail, wakeups.waiter(["other", "spare"]) as other:
                    # The first (re)connect wakes everyone (what it may have missed): wait for
                    # it, then start afresh.
                    await wait_for_async(lambda: mail.woken.is_set() and other.woken.is_set(),
                                         timeout=20, message="the LISTEN connection")
                    mail.woken.clear()
                    other.woken.clear()
                    assert listeners(conn, q.channel) == 1  # one connection for both
                    conn.execute("SELECT pg_notify(%s, 'mail')", [q.channel])
                    assert await mail.wait(10)
                    assert not other.woken.is_set()
                    assert not await other.wait(0.3)  # bounded: the wait ends, unwoken
                    conn.execute("SELECT pg_notify(%s, 'spare')", [q.channel])
                    assert await other.wait(10)
                # Nobody waits: the connection goes (within the listener's pause).
                await wait_for_async(lambda: listeners(conn, q.channel) == 0, timeout=10,
                                     interval=0.05, message="the LISTEN connection to close")
            finally:
                await wakeups.close()

    asyncio.run(scenario())
