"""The supervisor with a fork server, with real processes and no database: children forked by
it are this process's own children; while it is dead, children are started by exec; a new one
takes over; one whose app does not import reports the boot-error code."""

from __future__ import annotations

import asyncio
import json
import os
import signal

from jobrun import protocol
from jobrun.testing import wait_for_async
from jobrun.worker.forkserver import ForkServer, ForkServers
from jobrun.worker.supervisor import Supervisor

from tests.masterproc import live, title

APP = "tests.apps.spawnapp"


async def until(predicate, timeout: float = 30.0) -> None:
    await wait_for_async(predicate, timeout)


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), out.get("PYTHONPATH")]))
    return out


class Harness:
    def __init__(self, loop: asyncio.AbstractEventLoop, servers: ForkServers | None) -> None:
        self.frames: asyncio.Queue = asyncio.Queue()
        self.exits: asyncio.Queue = asyncio.Queue()
        self.supervisor = Supervisor(loop, app=APP, max_tasks=0, max_memory=0,
                                     soft_time_limit=0.0, alive_interval=1.0, env=env(),
                                     forkservers=servers,
                                     on_frame=lambda c, f: self.frames.put_nowait((c, f)),
                                     on_exit=lambda c, s: self.exits.put_nowait((c, s)))

    async def ready_child(self):
        child = self.supervisor.spawn(1, 0)
        while True:
            got, frame = await asyncio.wait_for(self.frames.get(), 30)
            if got is child and frame["t"] == "ready":
                return child

    async def imported_by(self, child) -> int:
        child.send(protocol.job_frame({"id": 1, "token": 1, "owner": "t", "task": "spawn.info",
                                       "queue": "default", "attempt": 1, "max_attempts": 1,
                                       "priority": 0, "created_at": 0.0, "key": None}, "null"))
        while True:
            got, frame = await asyncio.wait_for(self.frames.get(), 30)
            if got is child and frame["t"] == "result":
                return json.loads(frame["result"])["imported_by"]

    async def end(self, child) -> int:
        child.signal(signal.SIGKILL)
        while True:
            got, status = await asyncio.wait_for(self.exits.get(), 30)
            if got is child:
                return status


def test_children_come_from_the_fork_server_then_exec_while_it_is_dead():
    async def scenario():
        loop = asyncio.get_running_loop()
        servers = ForkServers(loop, APP, env())
        servers.start()
        assert await asyncio.wait_for(servers.booted(), 30) is None
        first = servers.current
        h = Harness(loop, servers)
        try:
            child = await h.ready_child()
            assert os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            assert await h.imported_by(child) == first.pid  # forked; our own child all the same
            assert await h.end(child) == -signal.SIGKILL  # waited on and reaped by us
            first.kill()
            await asyncio.wait_for(first.gone.wait(), 30)
            assert servers.current is None or not servers.current.ready  # restarting: exec
            child = await h.ready_child()
            assert await h.imported_by(child) == child.pid
            await h.end(child)
            await until(lambda: servers.current is not None and servers.current.ready)
            second = servers.current
            second_pid = second.pid
            assert second.pid != first.pid
            child = await h.ready_child()
            assert await h.imported_by(child) == second.pid
            await h.end(child)
        finally:
            await servers.stop()
        assert second.exited and not live(second_pid)

    asyncio.run(scenario())


def test_a_fork_server_whose_app_does_not_import_reports_the_boot_error(tmp_path):
    async def scenario():
        flag = tmp_path / "broken"
        flag.write_text("yes")
        broken = {**env(), "SPAWNAPP_BROKEN_IF": str(flag)}
        servers = ForkServers(asyncio.get_running_loop(), APP, broken)
        servers.start()
        assert await asyncio.wait_for(servers.booted(), 30) == protocol.EXIT_BOOT_ERROR
        await servers.stop()

    asyncio.run(scenario())


def test_a_launched_server_forks_the_first_children_by_itself_and_they_are_adopted():
    async def scenario():
        request = {"max_tasks": 0, "max_memory": 0, "soft_time_limit": 0.0, "alive_interval": 1.0}
        launched = ForkServer(APP, env(), 0).launch(initial=3, request=request)
        servers = ForkServers(asyncio.get_running_loop(), APP, env(), launched=launched)
        servers.start()
        assert await asyncio.wait_for(servers.booted(), 30) is None
        h = Harness(asyncio.get_running_loop(), servers)
        try:
            first, second = h.supervisor.spawn(1, 0), h.supervisor.spawn(2, 0)
            # Forked before anyone asked: their pids are known at once, their ready frames
            # waited in their sockets.
            assert first.pid and second.pid and first.pid != second.pid
            ready = set()
            while len(ready) < 2:
                child, frame = await asyncio.wait_for(h.frames.get(), 30)
                assert frame["t"] == "ready"
                ready.add(child)
            assert ready == {first, second}
            assert await h.imported_by(first) == launched.pid
            assert title(second.pid).startswith("jobrun-child 2")
            unadopted = launched._adoptable[3][0]  # the third was not wanted
            assert live(unadopted)
            later = h.supervisor.spawn(4, 0)  # not a first child: by request, as ever
            await until(lambda: later.pid)
            assert later.pid not in (first.pid, second.pid, unadopted)
            for child in (first, second, later):
                await h.end(child)
        finally:
            await servers.stop()
        assert not live(unadopted)  # stopped and reaped with the server

    asyncio.run(scenario())
