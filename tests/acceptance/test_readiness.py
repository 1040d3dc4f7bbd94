"""/readyz of a wired master with a real fork server and a real child, no database: an idle
child reserved for a claim in flight still counts (readiness flapped for the length of
every claim on an idle master)."""

from __future__ import annotations

from jobrun.testing import wait_for_async
from jobrun.worker.supervisor import ChildState as S

from tests.wiredmaster import run_with_master


async def until(predicate, timeout: float = 30.0):
    return await wait_for_async(predicate, timeout)


def test_ready_while_a_claim_runs_for_the_idle_child():
    async def body(m):
        d = m.dispatcher
        d.replenish()
        [child] = m.children.current()
        await until(lambda: child.state is S.IDLE and d.booted.is_set())
        assert m.ready()
        m.children.reserve(child)  # what the hand-out does while the claim statement runs
        assert m.ready()
        m.children.unreserve(child)
        m.stopping = True
        assert not m.ready()
        m.stopping = False
    run_with_master(body, concurrency=1)
