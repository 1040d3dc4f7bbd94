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

The master's parts are stopped by the stage each names in the master's list of parts
(lifecycle.Parts): the claimer, the notifier, the scheduler and the elector in stage 1, the
heartbeater in 4, the other services in 5, the watchdog and the fork servers in 6. The teardown
sees the master only through ``Crew``: the parts, and the few that stages 1-4 ask more of than
to stop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sized

from jobrun.logs import event
from jobrun.policy import RELEASED, SUCCEEDED
from jobrun.worker.child import ChildState
from jobrun.worker.lifecycle import Parts

log = logging.getLogger("jobrun.master")
STAGES = 6
# The stages that stop parts (each part of the master's list names one).
CLAIMS, LEASES, SERVICES, LAST = 1, 4, 5, 6
# Budgets.
STOP_CLAIMING = 5.0
REAP_CHILDREN = 5.0
FLUSH = 10.0
SERVICE_STOP = 10.0
CLOSE = 5.0


class Pool(Protocol):
    """The dispatcher: its running jobs and the outcomes counted."""
    closing: bool
    outcomes: Mapping[str, int]

    def running(self) -> int: ...


class Children(Protocol):
    """The supervisor: the children alive, and the two ways to end one."""
    def alive(self) -> list[Any]: ...

    def kill(self, child: Any, reason: str) -> None: ...

    def stop(self, child: Any) -> None: ...


class Claims(Protocol):
    """The claimer: jobs that waited in pipes go back; its connection closes last."""
    claimed: int

    async def given_back(self, timeout: float) -> Any: ...

    async def close(self) -> None: ...


class Outcomes(Protocol):
    """The completer: the outcomes not yet written."""
    pending: Sized
    running: bool

    async def drain(self, timeout: float) -> bool: ...


@dataclass(frozen=True)
class Crew:
    """What the teardown needs from the master, and no more."""
    parts: Parts
    pool: Pool
    children: Children
    claimer: Claims
    completer: Outcomes
    changed: asyncio.Event  # set at every child frame or exit
    fast: asyncio.Event  # set: no drain, or cut it short (SIGQUIT, a second SIGTERM)
    grace: Callable[[], float]  # --grace, as the last reload left it
    exit_code: Callable[[], int]


def _stage(n: int, what: str, **fields) -> None:
    event(log, logging.INFO, f"teardown {n}/{STAGES}: {what}", **fields)


async def run(c: Crew) -> None:
    d = c.pool
    d.closing = True
    _stage(1, "stop claiming", budget=STOP_CLAIMING)
    await c.parts.stop(CLAIMS, timeout=STOP_CLAIMING)  # the scheduler's lease goes at once

    drain = not c.fast.is_set()
    _stage(2, "drain children", budget=c.grace() if drain else 0, busy=d.running())
    if drain and d.running():
        waiter = asyncio.ensure_future(_wait(c, lambda: not d.running()))
        fast = asyncio.ensure_future(c.fast.wait())
        await asyncio.wait([waiter, fast], timeout=c.grace(), return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        fast.cancel()

    _stage(3, "release what is left", budget=2 * REAP_CHILDREN, busy=d.running())
    children = c.children
    for child in children.alive():
        if child.job is not None:
            children.kill(child, "shutdown")
        elif child.state is ChildState.STARTING:
            children.kill(child, "stopping")
        else:
            children.stop(child)
    if not await _wait(c, lambda: not children.alive(), REAP_CHILDREN):
        for child in children.alive():
            children.kill(child, "stopping")
        await _wait(c, lambda: not children.alive(), REAP_CHILDREN)
    await c.claimer.given_back(REAP_CHILDREN)  # jobs that waited in pipes, back to the queue

    _stage(4, "flush completions", budget=FLUSH, pending=len(c.completer.pending))
    await c.parts.stop(LEASES)  # the heartbeater: no lease is held any more, nothing to renew
    if c.completer.running and not await c.completer.drain(FLUSH):
        event(log, logging.ERROR, "shutdown.unrecorded", jobs=len(c.completer.pending),
              note="outcomes could not be written; those leases will expire and be reaped")

    _stage(5, "stop the services", budget=SERVICE_STOP)
    await c.parts.stop(SERVICES, timeout=SERVICE_STOP)

    _stage(6, "close connections")
    await c.parts.stop(LAST, timeout=CLOSE)  # the watchdog, the fork servers
    await c.claimer.close()
    counts = d.outcomes
    event(log, logging.INFO, "master.stopped", exit_code=c.exit_code(), claimed=c.claimer.claimed,
          succeeded=counts[SUCCEEDED], released=counts[RELEASED],
          failed=sum(n for k, n in counts.items() if k not in (SUCCEEDED, RELEASED, "given_back")),
          given_back=counts["given_back"])


async def _wait(c: Crew, condition: Callable[[], bool], timeout: float | None = None) -> bool:
    """Wait until ``condition()`` holds, re-checking at every child frame or exit."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not condition():
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return False
        c.changed.clear()
        try:
            await asyncio.wait_for(c.changed.wait(), remaining)
        except asyncio.TimeoutError:
            return False
    return True
