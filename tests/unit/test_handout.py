"""The hand-out (worker/handout.py) of a wired master, with children that are socketpairs and
no process or database: what a claim is sized for, where its rows go, and what comes back."""

from __future__ import annotations

import asyncio
import socket

from jobrun import protocol
from jobrun.config import Settings
from jobrun.worker.child import ChildState
from jobrun.worker.forkserver import ForkedProcess
from jobrun.worker.master import Master
from jobrun.worker.child import Child

S = ChildState


def rows(first: int, n: int, task: str = "noop") -> list[dict]:
    return [{"id": i, "lease_token": 1, "task": task, "queue": "default", "attempts": 1,
             "max_attempts": 3, "crashes": 0, "created_at": 0.0, "priority": 0,
             "idempotency_key": None, "traceparent": None, "payload": "null"}
            for i in range(first, first + n)]


def with_children(body, n: int = 2, **settings) -> None:
    """``body(master, children, peers)``: a wired master whose ``n`` idle children are the
    near ends of socketpairs (``peers`` read what they were sent)."""
    async def scenario():
        m = Master(Settings(app="x", concurrency=n, metrics_addr="off", spawn="exec",
                            **settings), "postgresql://unused")
        m.loop = asyncio.get_running_loop()
        m.done, m.fast = asyncio.Event(), asyncio.Event()
        m._wire()
        kids, peers = [], []
        for index in range(1, n + 1):
            near, far = socket.socketpair()
            near.setblocking(False)
            child = Child(index=index, generation=0, process=ForkedProcess(), sock=near,
                          pidfd=-1)
            m.children.add(child)
            m.children.ready(child)
            kids.append(child)
            peers.append(far)
        try:
            body(m, kids, peers)
        finally:
            for s in peers:
                s.close()
            for child in kids:
                child.sock.close()
    asyncio.run(scenario())


def received(peer: socket.socket) -> list[int]:
    peer.setblocking(False)
    ids = []
    try:
        data = peer.recv(1 << 20)
    except BlockingIOError:
        return ids
    for body in protocol.FrameReader().feed(data):
        ids.append(protocol.decode(body)["id"])
    return ids


def test_one_row_for_each_reserved_child_and_the_rest_back_without_run_times():
    def body(m, kids, peers):
        handout = m.claimer.handout
        takers, limit = handout.reserve()
        assert takers == kids and limit == 2  # no run time known: nothing ahead
        assert all(c.state is S.RESERVED for c in kids) and m.children.takes_jobs()
        orphans = handout.hand_out(takers, rows(1, 3), claimed=1.0)
        assert [r["id"] for r in orphans] == [3]  # no child may take a job of unknown length
        assert [c.state for c in kids] == [S.BUSY, S.BUSY]
        assert [c.job.id for c in kids] == [1, 2] and kids[0].job.claimed == 1.0
        assert [received(p) for p in peers] == [[1], [2]]
        assert handout.reserve() == ([], 0)  # both busy, no room: no claim

    with_children(body)


def test_short_jobs_fill_the_children_holding_fewest_up_to_their_cap():
    def body(m, kids, peers):
        m.dispatcher.runtime["noop"] = 0.001
        handout = m.claimer.handout
        takers, limit = handout.reserve()
        assert limit > 2  # room ahead for short jobs
        assert handout.hand_out(takers, rows(1, 5), claimed=1.0) == []
        assert [c.held() for c in kids] == [3, 2]  # the one holding fewest takes the next
        assert handout.hand_out([], rows(6, 4), claimed=1.0) == rows(9, 1)
        assert [c.held() for c in kids] == [4, 4]  # the cap (--prefetch 4)
        assert sorted(id for p in peers for id in received(p)) == list(range(1, 9))
        assert all(c.state is S.BUSY for c in kids)

    with_children(body, prefetch=4)


def test_children_a_claim_brought_nothing_for_are_idle_again_and_a_retired_one_gets_nothing():
    def body(m, kids, peers):
        handout = m.claimer.handout
        handout.reserve()
        handout.unreserve()  # the statement failed
        assert [c.state for c in kids] == [S.IDLE, S.IDLE]
        takers, _ = handout.reserve()
        assert handout.hand_out(takers, rows(1, 1), claimed=1.0) == []
        assert [c.state for c in kids] == [S.BUSY, S.IDLE]  # one row for two children
        takers, _ = handout.reserve()
        assert takers == [kids[1]]
        m.children.retire(kids[1])  # a reload retired it while the claim ran
        orphans = handout.hand_out(takers, rows(2, 1), claimed=1.0)
        assert [r["id"] for r in orphans] == [2] and kids[1].job is None
        assert handout.reserve() == ([], 0)  # none idle

    with_children(body)


def test_a_child_whose_socket_broke_gives_its_rows_back_and_is_replaced():
    def body(m, kids, peers):
        handout = m.claimer.handout
        takers, _ = handout.reserve()
        kids[0].sock.shutdown(socket.SHUT_WR)  # its socket takes nothing more
        orphans = handout.hand_out(takers, rows(1, 2), claimed=1.0)
        assert [r["id"] for r in orphans] == [1]
        assert kids[0].state is S.RETIRING and kids[0].job is None
        assert kids[0].kill_reason == "unwritable"
        assert kids[1].job.id == 2 and received(peers[1]) == [2]

    with_children(body)
