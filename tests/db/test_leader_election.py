"""Two electors on a real PostgreSQL (jobrun/worker/leader.py): one leads, the other follows;
the cluster's maintenance (reaper, aging sweeper, registry purge) runs only on the leader; a
leader that stops renewing stops its maintenance at its deadline and the other takes over
within ttl + period, reaping what expired meanwhile."""

from __future__ import annotations

import asyncio
import time

from psycopg import sql

from jobrun.sql import for_schema
from jobrun.worker.aging import AgingSweeper
from jobrun.worker.claimer import claim_params
from jobrun.worker.leader import Elector
from jobrun.worker.reaper import Reaper
from jobrun.worker.registry import Registry

TTL = 1.5
PERIOD = TTL / 3
SLACK = 1.0  # statement and scheduling time on a loaded machine


class FreezableElector(Elector):
    """An elector whose process can be "frozen": its next round trip never returns, as if
    SIGSTOPped mid-loop (its lease deadline still passes on the monotonic clock)."""

    frozen = False

    async def elect(self, conn):
        if self.frozen:
            await asyncio.Event().wait()
        return await super().elect(conn)


class CountingReaper(Reaper):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.ticks: list[float] = []

    async def tick(self, conn):
        self.ticks.append(time.monotonic())
        return await super().tick(conn)


class CountingSweeper(AgingSweeper):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.ticks: list[float] = []

    async def tick(self, conn):
        self.ticks.append(time.monotonic())
        return await super().tick(conn)


async def until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def expired_lease(client, schema, owner="gone:1:x", expires_in=-1.0):
    """A job leased by a master that is gone, its lease past (or to pass in ``expires_in``
    seconds) on the database clock."""
    job = client.enqueue("t.lost").job
    with client._connection().cursor() as cur:
        cur.execute(client.queries.claim_jobs, claim_params(["default"], 1, owner, 30))
        cur.execute(sql.SQL("UPDATE {}.jobs SET lease_expires_at = now() + make_interval("
                            "secs => %s) WHERE id = %s").format(sql.Identifier(schema)),
                    [expires_in, job.id])
    return job.id


def test_one_leads_and_only_its_maintenance_runs_until_it_stops_renewing(
        client, pg_dsn, schema, admin_conn):
    q = for_schema(schema)
    client.queue_add("aged", aging="1s")

    def registry(leader, owner):
        row = {"owner": owner, "host": "h", "pid": 1, "app": "t", "queues": ["default"],
               "concurrency": 1, "slots": 1, "busy": 0, "version": "t", "inflight": [], "tasks": [],
               "held": "{}"}
        return Registry(pg_dsn, q, row=lambda: dict(row), on_depth=lambda rows: None,
                        interval=0.1, leader=leader)

    async def go():
        a = FreezableElector(pg_dsn, q, "a", ttl=TTL)
        b = FreezableElector(pg_dsn, q, "b", ttl=TTL)
        parts = {}
        for name, e in (("a", a), ("b", b)):
            parts[name] = (CountingReaper(pg_dsn, q, interval=0.1, retention=0, leader=e),
                           CountingSweeper(pg_dsn, q, None, leader=e), registry(e, name))
        services = [a, *parts["a"], b, *parts["b"]]
        try:
            a.start()
            await until(lambda: a.leading, 10, "a to lead")
            for s in services[1:]:
                s.start()
            (reaper_a, aging_a, _), (reaper_b, aging_b, _) = parts["a"], parts["b"]
            await until(lambda: len(reaper_a.ticks) >= 3 and aging_a.ticks, 10,
                        "a's maintenance")

            # A ghost registry row goes stale: the leader's registry purges it.
            admin_conn.execute(sql.SQL(
                "INSERT INTO {}.workers (owner, host, pid, app, queues, concurrency, busy, version,"
                " last_seen) VALUES ('ghost', 'h', 2, 't', '{{}}', 1, 0, 't', now() - interval '1 h')"
            ).format(sql.Identifier(schema)))
            first = expired_lease(client, schema)
            await until(lambda: reaper_a.reaped == 1, 10, "a to reap")
            await until(lambda: not admin_conn.execute(sql.SQL(
                "SELECT 1 FROM {}.workers WHERE owner = 'ghost'").format(
                sql.Identifier(schema))).fetchone(), 10, "the stale row purged")
            # b follows: its elector was refused (and its parts, started with a's, never ran).
            assert b.lease.renew_at > 0
            assert not b.leading and a.leading
            assert reaper_b.ticks == [] and aging_b.ticks == [] and reaper_b.reaped == 0
            assert client.get(first).status == "queued"

            # a freezes (stops renewing); another lease expires after a stopped acting.
            a.frozen = True
            frozen_at = time.monotonic()
            second = expired_lease(client, schema, owner="gone:2:y", expires_in=TTL)
            await until(lambda: b.leading, TTL + PERIOD + SLACK + 2, "b to take over")
            took = time.monotonic() - frozen_at
            assert took <= TTL + PERIOD + SLACK, took
            # a stopped acting at its deadline, a period before b could lead: no overlap.
            assert not a.still_leading()
            stopped_a = max(reaper_a.ticks[-1], aging_a.ticks[-1])
            await until(lambda: reaper_b.reaped == 1, PERIOD + SLACK, "b to reap at once")
            assert stopped_a < min(reaper_b.ticks[0], aging_b.ticks[0])
            reaped_after = time.monotonic() - frozen_at
            assert reaped_after <= TTL + PERIOD + 0.1 + SLACK, reaped_after
            assert client.get(second).status == "queued"
            row = admin_conn.execute(sql.SQL("SELECT owner, term FROM {}.scheduler_leader")
                                     .format(sql.Identifier(schema))).fetchone()
            assert tuple(row) == ("b", 2)
            n_a = len(reaper_a.ticks)
            await until(lambda: len(reaper_b.ticks) >= 3, 5, "b's reaper going on")
            assert len(reaper_a.ticks) == n_a
        finally:
            for s in reversed(services):
                await s.stop()

    asyncio.run(go())


def test_a_clean_stop_hands_the_lease_over_within_a_period(pg_dsn, schema, admin_conn):
    q = for_schema(schema)

    async def go():
        a = Elector(pg_dsn, q, "a", ttl=TTL)
        b = Elector(pg_dsn, q, "b", ttl=TTL)
        a.start()
        try:
            await until(lambda: a.leading, 10, "a to lead")
            b.start()
            await until(lambda: b.lease.renew_at > 0, 10, "b to be refused once")
            assert not b.leading
            await a.stop()
            stopped = time.monotonic()
            await until(lambda: b.leading, PERIOD + SLACK, "b to lead")
            return time.monotonic() - stopped
        finally:
            await a.stop()
            await b.stop()

    took = asyncio.run(go())
    assert took <= PERIOD + SLACK
    # b released the lease when it stopped: the row is gone.
    assert admin_conn.execute(sql.SQL("SELECT count(*) FROM {}.scheduler_leader")
                              .format(sql.Identifier(schema))).fetchone()[0] == 0
