"""The master's teardown, in stages, each with its own time budget and a log line:

    1/6 stop claiming        the claimer finishes a claim in flight; the notifier, the
                             scheduler and the elector stop (the leader lease is given up
                             at once)
    2/6 drain children       (SIGTERM) in-flight jobs get --grace seconds; SIGQUIT cuts it short
    3/6 release the rest     children still running are killed, their jobs released at once
                             (the attempt refunded); jobs waiting in pipes are given back
    4/6 flush completions    every outcome submitted is written (or the failure is logged)
    5/6 stop the services    in the reverse of their start order
    6/6 close connections

The last line (``master.stopped``) gives the counts: claimed, succeeded, failed, released.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from jobrun.logs import event
from jobrun.policy import RELEASED, SUCCEEDED
from jobrun.worker.supervisor import ChildState

if TYPE_CHECKING:  # pragma: no cover
    from jobrun.worker.master import Master

log = logging.getLogger("jobrun.master")
STAGES = 6
STOP_CLAIMING = 5.0
REAP_CHILDREN = 5.0
FLUSH = 10.0
SERVICE_STOP = 10.0


def _stage(n: int, what: str, **fields) -> None:
    event(log, logging.INFO, f"teardown {n}/{STAGES}: {what}", **fields)


async def run(m: "Master") -> None:
    d = m.dispatcher
    d.closing = True
    _stage(1, "stop claiming", budget=STOP_CLAIMING)
    await m.claimer.stop(timeout=STOP_CLAIMING)
    await m.notifier.stop()
    await m.scheduler.stop()
    await m.elector.stop()  # gives the leader lease up at once

    _stage(2, "drain children", budget=m.settings.grace if m.stopping == "drain" else 0,
           busy=d.running())
    if m.stopping == "drain" and d.running():
        waiter = asyncio.ensure_future(_wait(m, lambda: not d.running()))
        fast = asyncio.ensure_future(m.fast.wait())
        await asyncio.wait([waiter, fast], timeout=m.settings.grace,
                           return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        fast.cancel()

    _stage(3, "release what is left", budget=2 * REAP_CHILDREN, busy=d.running())
    for child in m.supervisor.alive():
        if child.job is not None:
            m.supervisor.kill(child, "shutdown")
        elif child.state is ChildState.STARTING:
            m.supervisor.kill(child, "stopping")
        else:
            m.supervisor.stop(child)
    if not await _wait(m, lambda: not m.supervisor.alive(), REAP_CHILDREN):
        for child in m.supervisor.alive():
            m.supervisor.kill(child, "stopping")
        await _wait(m, lambda: not m.supervisor.alive(), REAP_CHILDREN)
    await m.claimer.given_back(REAP_CHILDREN)  # jobs that waited in pipes, back to the queue

    _stage(4, "flush completions", budget=FLUSH, pending=len(m.completer.pending))
    await m.heartbeater.stop()  # no lease is held any more: nothing to renew
    if m.completer.running and not await m.completer.drain(FLUSH):
        event(log, logging.ERROR, "shutdown.unrecorded", jobs=len(m.completer.pending),
              note="outcomes could not be written; those leases will expire and be reaped")

    _stage(5, "stop the services", budget=SERVICE_STOP)
    for service in reversed(m.services):
        await service.stop(timeout=SERVICE_STOP)

    _stage(6, "close connections")
    await m.stop_forkservers()
    await m.claimer.close()
    m.systemd.stop()
    counts = d.outcomes
    event(log, logging.INFO, "master.stopped", exit_code=m.exit_code, claimed=m.claimer.claimed,
          succeeded=counts[SUCCEEDED], released=counts[RELEASED],
          failed=sum(n for k, n in counts.items() if k not in (SUCCEEDED, RELEASED, "given_back")),
          given_back=counts["given_back"])
    m.done.set()


async def _wait(m: "Master", condition, timeout: float | None = None) -> bool:
    """Wait until ``condition()`` holds, re-checking at every child frame or exit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not condition():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        changed = m.claimer.wake_event
        changed.clear()
        try:
            await asyncio.wait_for(changed.wait(), remaining)
        except asyncio.TimeoutError:
            return False
    return True
