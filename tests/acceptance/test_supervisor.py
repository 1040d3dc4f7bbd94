"""The supervisor's writes to a child, with real child processes and no database: frames larger
than the socket buffer arrive whole (written as the child reads), and a child whose socket
breaks while a frame is half-written is killed, with a log line, and reported as exited."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket

from jobrun import protocol
from jobrun.worker.supervisor import Supervisor

APP = "tests.apps.taskapp"


class Recorder:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.frames: asyncio.Queue = asyncio.Queue()
        self.exits: asyncio.Queue = asyncio.Queue()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
        self.supervisor = Supervisor(loop, app=APP, max_tasks=0, max_memory=0,
                                     soft_time_limit=0.0, alive_interval=1.0, env=env,
                                     on_frame=lambda c, f: self.frames.put_nowait((c, f)),
                                     on_exit=lambda c, s: self.exits.put_nowait((c, c.kill_reason, s)))

    async def frame(self, kind: str) -> dict:
        while True:
            _, frame = await asyncio.wait_for(self.frames.get(), 20)
            if frame["t"] == kind:
                return frame


def job(job_id: int, payload: object) -> bytes:
    return protocol.job_frame({"id": job_id, "token": 1, "owner": "test", "task": "noop",
                               "queue": "default", "attempt": 1, "max_attempts": 1,
                               "priority": 0, "created_at": 0.0, "key": None,
                               "traceparent": None}, json.dumps(payload))


def test_frames_larger_than_the_socket_buffer_arrive_whole():
    async def scenario():
        rec = Recorder(asyncio.get_running_loop())
        child = rec.supervisor.spawn(1, 0)
        try:
            await rec.frame("ready")
            blob = "y" * (4 * 1024 * 1024)
            assert child.send(job(1, {"blob": blob}))
            assert child._outbox, "a 4 MB frame should not fit the socket buffer at once"
            assert child.send(job(2, "small"))  # queued behind it, in order
            first = await rec.frame("result")
            second = await rec.frame("result")
            assert (first["id"], second["id"]) == (1, 2)
            assert json.loads(first["result"]) == {"ok": True, "payload": {"blob": blob}}
            assert not child._outbox
        finally:
            child.signal(signal.SIGKILL)
            await asyncio.wait_for(rec.exits.get(), 20)

    asyncio.run(scenario())


def test_a_child_whose_socket_breaks_mid_frame_is_killed(caplog):
    async def scenario():
        rec = Recorder(asyncio.get_running_loop())
        child = rec.supervisor.spawn(1, 0)
        await rec.frame("ready")
        child.signal(signal.SIGSTOP)  # it reads nothing more
        try:
            assert child.send(job(1, "z" * (4 * 1024 * 1024)))
            assert child._outbox
            child.sock.shutdown(socket.SHUT_WR)  # the next write of the rest fails
            child.signal(signal.SIGCONT)
            exited, reason, _ = await asyncio.wait_for(rec.exits.get(), 20)
            assert exited is child and reason == "unwritable"  # (it may see EOF and exit first)
        finally:
            child.signal(signal.SIGKILL)

    with caplog.at_level("ERROR", logger="jobrun.worker.supervisor"):
        asyncio.run(scenario())
    assert "child.unwritable" in caplog.text
