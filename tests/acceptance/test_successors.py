"""A fresh forked child with its first job waiting, a recycled child's successor, and a child
retired with jobs in hand: the dispatcher and supervisor of a wired master with a real fork
server and real children, and no database (the claim is played by handing the dispatcher jobs
as the hand-out does)."""

from __future__ import annotations

import time

from jobrun import protocol
from jobrun.worker.master import Master
from jobrun.testing import wait_for_async
from jobrun.worker.child import ChildState, Inflight

from tests.wiredmaster import run_with_master

S = ChildState


async def until(predicate, timeout: float = 30.0):
    return await wait_for_async(predicate, timeout)


def job(job_id: int, task: str, payload: str) -> tuple[Inflight, bytes]:
    inflight = Inflight(id=job_id, token=1, task=task, queue="default", attempts=1,
                        max_attempts=3, crashes=0, created_at=0.0, claimed=time.monotonic())
    frame = protocol.job_frame({"id": job_id, "token": 1, "owner": "test", "task": task,
                                "queue": "default", "attempt": 1, "max_attempts": 3,
                                "priority": 0, "created_at": 0.0, "key": None,
                                "traceparent": None}, payload)
    return inflight, frame


async def running_its_last_job(m: Master, job_id: int, seconds: str):
    """The one child, handed (as the claimer does) a sleep job: its last, at max_tasks 1."""
    d = m.dispatcher
    d.replenish()
    [child] = m.children.current()
    await until(lambda: child.state is S.IDLE)
    inflight, frame = job(job_id, "sleep", seconds)
    d.start_job(child, inflight)
    assert child.send(frame)
    return child, inflight


def test_a_job_parked_for_a_starting_child_starts_the_moment_it_is_ready():
    async def body(m: Master) -> None:
        d = m.dispatcher
        d.replenish()
        first, second = m.children.current()
        coming = m.claimer.handout.coming
        assert coming() == [first, second]  # starting, forked: a claim parks one each
        parked, frame = job(1, "noop", '"parked"')
        d.park(first, parked, frame)
        assert first.held() == 1 and first.holding() == [parked]
        assert [lease.id for lease in d.leases()] == [1]  # its lease is renewed meanwhile
        assert coming() == [second]
        # Handed over with its ready frame (no claimer runs here): it runs and succeeds.
        await until(lambda: d.outcomes["succeeded"] == 1)
        await until(lambda: second.state is S.IDLE)
        assert first.state is S.IDLE and m.completer.pending[0].id == 1

    run_with_master(body, concurrency=2)


def test_a_parked_job_of_a_child_that_dies_before_it_is_ready_is_given_back():
    async def body(m: Master) -> None:
        d = m.dispatcher
        returned: list[list[dict]] = []
        d.give_back = returned.append
        d.replenish()
        [child] = m.children.current()
        d.park(child, *job(7, "noop", "null"))
        assert not child.pid  # the fork server has not answered yet: the kill waits for it
        m.supervisor.kill(child, "test")
        await until(lambda: returned)
        await until(lambda: child not in m.supervisor.alive())
        assert returned == [[{"id": 7, "lease_token": 1, "queue": "default"}]]
        assert child.parked is None and not d.leases()

    run_with_master(body, concurrency=1)


def test_the_successor_of_a_child_on_its_last_job_stands_by_until_that_job_ends():
    async def body(m: Master) -> None:
        d = m.dispatcher
        child, inflight = await running_its_last_job(m, 1, "0.5")
        successor = child.successor
        assert successor is not None and successor.predecessor is child
        assert m.children.current() == [successor]  # the slot is the successor's now
        await until(lambda: successor.state is S.STANDBY)
        # Ready, but not idle: -c 1 never runs two jobs at once.
        assert m.children.idle() == [] and child.job is inflight
        # The job it would be handed waits on one whose run time is unknown: none is
        # claimed for it ahead.
        assert m.claimer.handout.coming() == []
        await until(lambda: d.outcomes["succeeded"] == 1)
        assert successor.state is S.IDLE and successor.predecessor is None
        await until(lambda: child not in m.supervisor.alive())  # the recycled one exited
        assert m.children.current() == [successor] and len(m.supervisor.alive()) == 1

    run_with_master(body, concurrency=1, max_tasks_per_child=1)


def test_a_successor_takes_over_when_its_predecessor_dies_on_its_last_job():
    async def body(m: Master) -> None:
        d = m.dispatcher
        child, _ = await running_its_last_job(m, 3, "30")
        successor = child.successor
        await until(lambda: successor.state is S.STANDBY)
        m.supervisor.kill(child, "timeout")
        await until(lambda: successor.state is S.IDLE)
        assert d.outcomes["timeout"] == 1 and m.children.current() == [successor]

    run_with_master(body, concurrency=1, max_tasks_per_child=1)


def test_a_child_retired_by_a_resize_runs_what_it_holds_then_exits():
    """A busy child holding a job behind the one it runs, chosen by TTOU: it runs both and
    exits. It turned busy again when it ran on to the second job, then idle, and kept
    serving beside the pool it was retired from."""
    async def body(m: Master) -> None:
        d = m.dispatcher
        d.replenish()
        first, second = m.children.current()
        await until(lambda: first.state is S.IDLE and second.state is S.IDLE)
        for child, jobs in ((first, [job(1, "sleep", "0.2")]),
                            (second, [job(2, "sleep", "0.2"), job(3, "noop", "null")])):
            d.start_job(child, jobs[0][0])
            child.queued.extend(inflight for inflight, _ in jobs[1:])
            assert child.send(b"".join(frame for _, frame in jobs))
        d.resize(1)  # no child idle: the last one goes
        assert second.state is S.RETIRING and m.children.current() == [first]
        await until(lambda: d.outcomes["succeeded"] == 3)
        await until(lambda: second not in m.supervisor.alive(), 10)
        assert m.children.current() == [first] and first.state is S.IDLE

    run_with_master(body, concurrency=2)
