"""The heartbeater's fencing decisions, driven by an injected clock (no threads, no database:
with the event loop reported stalled, it renews nothing and only the deadlines decide)."""

from __future__ import annotations

import signal

from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun.worker.heartbeat import Heartbeater, Lease
from jobrun.policy import lease_deadline
from jobrun.sql import for_schema

from tests.profiles import examples


class FakeChild:
    def __init__(self) -> None:
        self.signals: list[int] = []

    def signal(self, signum: int) -> bool:
        self.signals.append(signum)
        return True


def make(ttl: float, leases: list[Lease], fences: list) -> Heartbeater:
    return Heartbeater(None, for_schema("jobrun"), "owner", ttl, leases=lambda: list(leases),
                       loop_alive=lambda period: False,
                       on_fence=lambda lease, reason: fences.append((lease.id, reason)))


@settings(max_examples=examples(300), deadline=None)
@given(ttl=st.floats(0.3, 120), since=st.floats(0, 1e6),
       steps=st.lists(st.floats(0.001, 30), min_size=1, max_size=60))
def test_fence_at_deadline_then_kill_after_grace(ttl, since, steps):
    child = FakeChild()
    lease = Lease(1, 7, child, since)
    fences: list = []
    hb = make(ttl, [lease], fences)
    deadline = lease_deadline(since, ttl, hb.period)
    now = since
    fenced_at = None
    for step in steps:
        now += step
        hb.tick(now)
        if now > deadline and fenced_at is None:
            fenced_at = now
        if fenced_at is None:
            assert child.signals == [] and fences == []  # never before the deadline
        else:
            assert child.signals[0] == signal.SIGUSR1 and fences == [(1, "not renewed in time")]
            killed = now >= fenced_at + hb.grace
            assert child.signals == ([signal.SIGUSR1, signal.SIGKILL] if killed else [signal.SIGUSR1])
    assert hb.fenced_total == (1 if fenced_at is not None else 0)


@settings(max_examples=examples(100), deadline=None)
@given(ttl=st.floats(0.3, 60), gap=st.floats(0.001, 10))
def test_a_lease_that_ends_before_the_kill_is_not_killed(ttl, gap):
    child = FakeChild()
    leases = [Lease(1, 1, child, 0.0)]
    fences: list = []
    hb = make(ttl, leases, fences)
    hb.tick(ttl)  # past the deadline: fenced
    assert child.signals == [signal.SIGUSR1]
    leases.clear()  # the child answered LeaseLost (or died): the master dropped the job
    hb.tick(ttl + hb.grace + gap)
    assert child.signals == [signal.SIGUSR1] and hb._fenced == {}


def test_each_lease_is_judged_on_its_own_clock():
    early, late = FakeChild(), FakeChild()
    fences: list = []
    hb = make(3.0, [Lease(1, 1, early, 0.0), Lease(2, 1, late, 10.0)], fences)
    hb.tick(2.5)  # deadline of the first: 0 + 3 - 1 = 2
    assert early.signals == [signal.SIGUSR1] and late.signals == []
    hb.tick(12.5)
    assert late.signals == [signal.SIGUSR1] and early.signals[-1] == signal.SIGKILL
    assert [f[0] for f in fences] == [1, 2]


class Busy(FakeChild):
    """A child that runs ``job`` while others wait in its pipe."""

    def __init__(self, job: Lease) -> None:
        super().__init__()
        self.running = {job.id: job}


def test_a_lease_waiting_in_a_pipe_is_fenced_once_its_child_runs_it():
    running = Lease(1, 1, None, 100.0)
    child = Busy(running)
    waiting = Lease(2, 1, child, 0.0)  # long past its deadline, but not started
    fences: list = []
    hb = make(3.0, [waiting], fences)
    hb.tick(5.0)
    # A signal now would interrupt job 1, whose lease is fine.
    assert child.signals == [] and fences == []
    child.running = {waiting.id: waiting}  # job 1 finished; the child starts job 2
    hb.tick(5.1)
    assert child.signals == [signal.SIGUSR1] and fences == [(2, "not renewed in time")]


def test_a_failed_renewal_is_tried_again_before_the_deadline_not_a_period_later():
    """Both tries of a beat failed (the connection refused): the next beat must come while a
    renewal can still be in time, not a full period later, at the deadline itself."""
    child = FakeChild()
    lease = Lease(1, 1, child, 0.0)
    fences: list = []
    hb = Heartbeater("postgresql://127.0.0.1:1/nowhere?connect_timeout=2", for_schema("jobrun"),
                     "owner", 3.0, leases=lambda: [lease], loop_alive=lambda period: True,
                     on_fence=lambda lease, reason: fences.append((lease.id, reason)))
    now = hb.period  # the first beat after the claim
    hb.clock = lambda: now
    hb.tick(now)
    assert hb.failures >= 1 and fences == []
    wait = hb._next_wait()
    assert wait < hb.period
    assert now + wait < lease_deadline(0.0, 3.0, hb.period)  # a try that can still be in time


def test_a_heartbeat_thread_that_fails_crashes_the_part():
    """An exception in the heartbeat thread reaches the event loop as the part's crash (the
    master then stops), instead of leaving the master running with no lease renewed."""
    import asyncio

    from jobrun.testing import wait_for_async

    def broken() -> list[Lease]:
        raise RuntimeError("a snapshot that fails")

    async def scenario() -> list[BaseException]:
        crashes: list[BaseException] = []
        hb = Heartbeater(None, for_schema("jobrun"), "owner", 0.3, leases=broken,
                         loop_alive=lambda period: True, on_fence=lambda lease, reason: None)
        hb.on_crash = lambda part, exc: crashes.append(exc)
        hb.start()
        try:
            await wait_for_async(lambda: crashes, 10, message="the part's crash")
        finally:
            await asyncio.wait_for(hb.stop(), 10)
        return crashes

    [crash] = asyncio.run(scenario())
    assert isinstance(crash, RuntimeError) and "a snapshot that fails" in str(crash)
