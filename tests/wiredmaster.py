"""A master wired in this process with a real fork server and real children, and no database:
its dispatcher and supervisor driven by hand (the claim is played by handing the dispatcher
jobs as the claimer does). Used by tests/acceptance/test_successors.py and test_readiness.py."""

from __future__ import annotations

import asyncio
import os

from jobrun.config import Settings
from jobrun.testing import wait_for_async
from jobrun.worker.master import Master


def forking_master(**settings) -> Master:
    """A master wired with a fork server, its children started by hand; no connection."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(),
                                                             os.environ.get("PYTHONPATH")]))
    master = Master(Settings(app="tests.apps.taskapp", metrics_addr="off", spawn="fork",
                             **settings), "postgresql://unused")
    master.loop = asyncio.get_running_loop()
    master.done = asyncio.Event()
    master.fast = asyncio.Event()
    master._wire()
    return master


async def booted(**settings) -> Master:
    m = forking_master(**settings)
    m.forkservers.start()
    assert await asyncio.wait_for(m.forkservers.booted(), 30) is None
    return m


def run_with_master(body, **settings) -> None:
    """Run ``await body(master)`` with a booted master, then stop its children and server."""
    async def scenario():
        m = await booted(**settings)
        try:
            await body(m)
        finally:
            await stop(m)
    asyncio.run(scenario())


async def stop(m: Master) -> None:
    m.dispatcher.closing = True
    for child in m.supervisor.alive():
        m.supervisor.kill(child, "stopping")
    await wait_for_async(lambda: not m.supervisor.alive(), 30)
    await m.forkservers.stop()
