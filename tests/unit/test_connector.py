"""The master's connection seam (jobrun/store/connector.py) without PostgreSQL: backoff as a
pure function, the one health state, sessions that replace a broken connection, and a part
(the registry) recovering through the seam with the fake connector."""

from __future__ import annotations

import asyncio
import logging
import threading

import psycopg
import pytest
from hypothesis import given, settings, strategies as st

from jobrun.sql import for_schema
from jobrun.store.connector import (
    CAP, CLAIMS, COMPLETIONS, HEARTBEATS, PLAIN, Connector, DbHealth, backoff, backoff_ceiling,
)
from jobrun.testing import wait_for_async
from jobrun.worker.registry import Registry

from tests.fakedb import FakeConnector
from tests.profiles import examples

failures = st.integers(min_value=0, max_value=10_000)
jitter = st.floats(min_value=0.0, max_value=1.0)
caps = st.floats(min_value=0.01, max_value=600.0)


@settings(max_examples=examples(200))
@given(failures, jitter, caps)
def test_backoff_stays_within_half_the_ceiling_and_the_cap(n, j, cap):
    wait = backoff(n, j, cap=cap)
    ceiling = backoff_ceiling(n, cap=cap)
    assert 0 < wait <= ceiling <= cap
    assert wait >= ceiling / 2


@settings(max_examples=examples(200))
@given(failures, jitter, caps)
def test_backoff_grows_with_the_failures_until_the_cap(n, j, cap):
    assert backoff_ceiling(n + 1, cap=cap) >= backoff_ceiling(n, cap=cap)
    assert backoff(n + 1, j, cap=cap) >= backoff(n, j, cap=cap)
    if backoff_ceiling(n, cap=cap) < cap:  # below the cap, every failure doubles it
        assert backoff_ceiling(n + 1, cap=cap) == min(cap, 2 * backoff_ceiling(n, cap=cap))
    assert backoff_ceiling(n + 64, cap=cap) == cap  # and it gets there


def test_backoff_reaches_the_cap_and_jitter_spreads_it():
    assert backoff_ceiling(1) == 0.2 and backoff_ceiling(100) == CAP
    assert backoff(100, 0.0) == CAP / 2 and backoff(100, 1.0) == CAP


def test_health_moves_on_success_and_failure_and_never_shows_a_password():
    now = [100.0]
    dsn = "postgresql://jobrun:Sekr1tPw@db.example/jobs"
    health = DbHealth(clock=lambda: now[0], dsn=dsn)
    assert health.report().failures == 0 and health.report().error is None
    now[0] += 7.5
    health.failed(psycopg.OperationalError(f"connection to {dsn} failed: refused\nDETAIL: more"))
    health.failed(OSError("password=Sekr1tPw rejected for postgresql://other:Other9Pw@x/y"))
    report = health.report()
    assert report.seconds_since_ok == 7.5 and report.failures == 2
    assert "Sekr1tPw" not in report.error and "Other9Pw" not in report.error
    assert "\n" not in report.error
    health.succeeded()
    report = health.report()
    assert report.seconds_since_ok == 0.0 and report.failures == 0
    assert report.as_dict()["db_failures"] == 0


def test_health_counts_every_failure_reported_from_many_threads():
    health = DbHealth()
    start = threading.Barrier(8)

    def fail() -> None:
        start.wait()
        for _ in range(500):
            health.failed(OSError("down"))

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert health.report().failures == 8 * 500


def test_each_profile_keeps_its_session_options():
    c = Connector("postgresql://h/db?options=-c%20work_mem%3D8MB")
    assert c.options(PLAIN) == {}
    assert c.options(CLAIMS) == {"prepare_threshold": 0}
    completions = c.options(COMPLETIONS)
    assert completions["prepare_threshold"] == 0
    assert completions["options"].startswith("-c work_mem=8MB")  # the DSN's own kept
    assert "-c enable_seqscan=off" in completions["options"]
    assert "-c plan_cache_mode=force_generic_plan" in completions["options"]
    heartbeats = c.options(HEARTBEATS, {"statement_timeout": "800"})
    assert "prepare_threshold" not in heartbeats
    assert "-c enable_seqscan=off" in heartbeats["options"]
    assert "-c statement_timeout=800" in heartbeats["options"]


def test_a_session_keeps_a_usable_connection_and_replaces_a_broken_one():
    async def scenario() -> None:
        fake = FakeConnector()
        session = fake.session(CLAIMS)
        first = await session.get()
        assert await session.get() is first and first.options == {"prepare_threshold": 0}
        first.terminate()
        assert await session.get() is first  # not known broken until a statement fails
        with pytest.raises(psycopg.OperationalError):
            await first.execute("SELECT 1")
        second = await session.get()
        assert second is not first and len(fake.connections) == 2
        await second.close()
        assert (await session.get()) is fake.connections[2]
        await session.close()
        assert fake.connections[2].closed and session.conn is None

    asyncio.run(scenario())


def test_pause_waits_the_jittered_backoff():
    async def scenario() -> list[float]:
        fake = FakeConnector()  # jitter 1.0: the ceiling itself
        await fake.pause(1)
        await fake.pause(3)
        await fake.pause(30, cap=2.0)
        return fake.pauses

    assert asyncio.run(scenario()) == [0.2, 0.8, 2.0]


def test_the_registry_recovers_from_a_terminated_connection_through_the_seam(caplog):
    """A part of the master on the fake: its connection is terminated, the tick fails (logged,
    counted, in the health), the next tick runs on a new connection (after a refused connect,
    with a growing backoff), the health is good again, and the row is deleted at the stop."""
    q = for_schema("jobrun")
    fake = FakeConnector({q.registry_purge_stale: [{"live": 1}]})
    row = {"owner": "h:1:x", "inflight": [], "host": "h", "pid": 1}
    errors: list[int] = []

    async def scenario() -> None:
        registry = Registry(fake, q, row=lambda: dict(row), on_depth=lambda rows: None,
                            interval=0.01, on_error=lambda: errors.append(1))
        registry.start()
        await wait_for_async(lambda: fake.current and q.registry_upsert in fake.current.executed,
                             5, message="the first refresh")
        assert fake.health.report().failures == 0
        fake.refuse = 1  # the first connect after the loss is refused too
        fake.connections[0].terminate()
        await wait_for_async(lambda: len(fake.connections) == 2
                             and q.registry_upsert in fake.connections[1].executed,
                             5, message="a refresh on a new connection")
        assert errors == [1, 1] and fake.pauses == [0.2, 0.4]
        report = fake.health.report()
        assert report.failures == 0 and "refused" in report.error
        assert "secret" not in report.error
        await registry.stop()
        assert fake.connections[1].executed[-1] == q.registry_delete
        assert fake.connections[1].closed

    with caplog.at_level(logging.WARNING, logger="jobrun.registry"):
        asyncio.run(scenario())
    assert [r.getMessage() for r in caplog.records].count("registry.failed") == 2


hosts = st.lists(st.sampled_from(["a", "b.example", "10.0.0.1", "/run/pg"]), min_size=1,
                 max_size=3)


@settings(max_examples=examples(100))
@given(hosts, st.sampled_from([None, "any", "read-write", "primary"]))
def test_a_dsn_naming_several_hosts_follows_the_primary_unless_it_chooses(names, given_attrs):
    dsn = f"host={','.join(names)} user=u dbname=d" + (
        f" target_session_attrs={given_attrs}" if given_attrs else "")
    params = psycopg.conninfo.conninfo_to_dict(Connector(dsn).dsn)
    if given_attrs:
        assert params["target_session_attrs"] == given_attrs
    elif len(names) > 1:
        assert params["target_session_attrs"] == "read-write"
    else:
        assert "target_session_attrs" not in params
    assert params["host"] == ",".join(names)


def test_a_url_with_several_hosts_follows_the_primary_and_keeps_its_password():
    params = psycopg.conninfo.conninfo_to_dict(
        Connector("postgresql://u:pw@h1:5432,h2:5433/db").dsn)
    assert params == {"user": "u", "password": "pw", "dbname": "db", "host": "h1,h2",
                      "port": "5432,5433", "target_session_attrs": "read-write"}
