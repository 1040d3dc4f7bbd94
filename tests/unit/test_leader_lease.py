"""The elector's pure part (jobrun/worker/leader.py): the lease's deadline, when to renew, when
to step down. No database, no real clock: times are passed in (Lease) or injected (Elector)."""

from __future__ import annotations

import logging

from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun.sql import for_schema
from jobrun.worker.leader import Elector, Lease
from tests.profiles import examples

TTLS = st.floats(min_value=0.3, max_value=120.0)
# One move of the lease: a round trip sent after `gap` (in periods) that took `took` (in
# periods), granted with a term or refused, or a step down after `gap`.
MOVES = st.lists(st.one_of(
    st.tuples(st.just("granted"), st.floats(0.0, 3.0), st.floats(0.0, 1.0), st.integers(1, 3)),
    st.tuples(st.just("refused"), st.floats(0.0, 3.0), st.floats(0.0, 1.0), st.just(0)),
    st.tuples(st.just("lose"), st.floats(0.0, 3.0), st.just(0.0), st.just(0)),
), max_size=30)


@settings(max_examples=examples(300), deadline=None)
@given(TTLS, MOVES, st.lists(st.floats(0.0, 4.0), min_size=1, max_size=10))
def test_the_lease_is_trusted_only_until_a_period_before_the_database_could_hand_it_on(
        ttl, moves, probes):
    """Whatever the moves, this process acts as leader only while its last granted renewal
    holds, and stops one period before the database's expiry (set after the send); after a
    refusal or a step down it tries again within a period; after a grant it renews before its
    deadline."""
    lease = Lease(ttl)
    p = lease.period
    now = 0.0
    expiry = None  # the database's expires_at for our last grant (monotonic)
    for kind, gap, took, term in moves:
        now += gap * p
        if kind == "lose":
            lease.lose(now)
            assert not lease.leading and lease.renew_at <= now + p
            continue
        sent, now = now, now + took * p
        if kind == "granted":
            was = (lease.leading, lease.term)
            new = lease.granted(term, sent)
            assert new == (not was[0] or was[1] != term)
            # The database wrote now() + ttl somewhere in the round trip: at the earliest, at send.
            expiry = sent + ttl
            assert lease.renew_at < lease.deadline
        else:
            lease.refused(sent)
            expiry = None
            assert not lease.leading and lease.renew_at <= sent + p
        for probe in probes:
            t = now + probe * p
            if lease.trusted(t):
                assert expiry is not None and t + p <= expiry + 1e-9


@settings(max_examples=examples(200), deadline=None)
@given(TTLS, st.integers(2, 50), st.floats(0.0, 0.99))
def test_renewals_in_time_keep_the_lease_without_a_gap(ttl, renewals, took):
    """A leader that renews every period, each taking less than a period, trusts its lease at
    every moment in between."""
    lease = Lease(ttl)
    p = lease.period
    lease.granted(1, 0.0)
    for _ in range(renewals):
        sent = lease.renew_at
        assert lease.due(sent) and not lease.due(sent - p / 10)
        for f in (0.0, 0.5, took):
            assert lease.trusted(sent + f * p)
        assert not lease.granted(1, sent)  # the same term: not a new leadership
    assert lease.term == 1


def elector(clock):
    return Elector("", for_schema("jobrun"), "me", ttl=3.0, clock=clock)


def test_a_frozen_leader_steps_down_when_it_wakes_past_its_deadline(caplog):
    now = [100.0]
    e = elector(lambda: now[0])
    woken = []
    e.subscribe(lambda: woken.append(e.leading))
    e.lease.granted(7, 100.0)
    assert e.still_leading()
    now[0] = 100.0 + 3.0 - 1.0 - 0.001  # just before the deadline (ttl - period)
    assert e.still_leading() and woken == []
    now[0] = 100.0 + 3.0 - 1.0  # the process was stopped and wakes here
    with caplog.at_level(logging.WARNING, logger="jobrun.scheduler"):
        assert not e.still_leading()
    [record] = [r for r in caplog.records if r.getMessage() == "scheduler.step_down"]
    assert record.jobrun_fields["reason"] == "lease deadline passed"
    assert woken == [False]  # the parts were told
    assert e.lease.renew_at <= now[0] + e.period  # and it asks again within a period
    assert not e._elected.is_set() and e._changed.is_set()


def test_stepping_down_twice_tells_the_parts_once():
    now = [0.0]
    e = elector(lambda: now[0])
    told = []
    e.subscribe(lambda: told.append(1))
    e.step_down("database error")  # not leading: nothing to tell
    e.lease.granted(1, 0.0)
    e.step_down("database error")
    e.step_down("database error")
    assert told == [1] and not e.still_leading()


def test_a_part_running_while_leading_is_stopped_by_a_step_down_even_if_elected_again():
    """while_leading cancels its body at a step down, also when the master is elected again
    before the waiter runs, and starts it afresh for the new term."""
    import asyncio

    from jobrun.worker.leader import while_leading

    async def go():
        e = elector(lambda: asyncio.get_running_loop().time())
        runs: list[str] = []
        gate, stopped = asyncio.Event(), asyncio.Event()

        async def body():
            runs.append("start")
            gate.set()
            try:
                await asyncio.Event().wait()
            finally:
                runs.append("stop")
                stopped.set()

        def elect(term):
            if e.lease.granted(term, e.clock()):
                e._elected.set()

        elect(1)
        task = asyncio.ensure_future(while_leading(e, body, "test"))
        await asyncio.wait_for(gate.wait(), 5)
        gate.clear()
        e.step_down("lease held by another master")
        elect(2)  # before the waiter ran
        await asyncio.wait_for(gate.wait(), 5)
        assert runs == ["start", "stop", "start"]
        stopped.clear()
        e.step_down("database error")
        await asyncio.wait_for(stopped.wait(), 5)
        assert runs == ["start", "stop", "start", "stop"]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(go())
