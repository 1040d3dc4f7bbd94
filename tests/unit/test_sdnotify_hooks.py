"""SystemdHooks' decisions: when READY is sent, when the watchdog ping is withheld, and the
watchdog part."""

from __future__ import annotations

import asyncio
import socket
import threading
from types import SimpleNamespace

import pytest

from jobrun.sdnotify import Notify
from jobrun.worker.sdnotify import SystemdHooks
from jobrun.worker.child import ChildState


def _hooks(children, loop_ok, thread):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind("\0jobrun-hooks-test-" + str(id(server)))
    notify = Notify("@" + server.getsockname()[1:].decode(), watchdog_usec=2_000_000)
    hooks = SystemdHooks(busy=lambda: 1, total=lambda: len(children), done=lambda: 0,
                         children=lambda: children,
                         loop_alive=lambda within: loop_ok[0],
                         heartbeater=lambda: SimpleNamespace(_thread=thread), notify=notify)
    hooks.ready = lambda: setattr(hooks, "_ready_pending", False) or notify.send(ready=1)
    server.settimeout(5)
    return hooks, server


def _nothing_more(server: socket.socket) -> bool:
    """No datagram waits. Notify.send is a sendto on a Unix datagram socket: what was sent is
    in the server's queue when the call returns, so there is nothing to wait for."""
    timeout = server.gettimeout()
    server.setblocking(False)
    try:
        server.recv(100)
    except BlockingIOError:
        return True
    finally:
        server.settimeout(timeout)
    return False


def test_ready_waits_for_every_child_and_is_sent_once():
    children = [SimpleNamespace(state=ChildState.IDLE), SimpleNamespace(state=ChildState.STARTING)]
    hooks, server = _hooks(children, [True], None)
    try:
        hooks.child_ready()
        children[1].state = ChildState.IDLE
        hooks.child_ready()
        hooks.child_ready()
        assert server.recv(100) == b"READY=1"
        assert _nothing_more(server)
    finally:
        server.close()


def test_no_ready_after_stopping():
    hooks, server = _hooks([SimpleNamespace(state=ChildState.IDLE)], [True], None)
    try:
        hooks.stopping()
        assert server.recv(100).startswith(b"STOPPING=1\nSTATUS=stopping: 1 busy")
        hooks.child_ready()
        assert _nothing_more(server)
    finally:
        server.close()


def test_watchdog_withheld_for_a_stalled_loop_or_a_dead_heartbeater():
    dead = threading.Thread(target=lambda: None)
    dead.start()
    dead.join()
    live = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)
    live.start()
    loop_ok = [True]
    hooks, server = _hooks([], loop_ok, live)
    server.close()
    assert hooks.watchdog_interval() == 1.0
    assert hooks.healthy()
    loop_ok[0] = False
    assert not hooks.healthy()
    loop_ok[0] = True
    hooks.heartbeater = lambda: SimpleNamespace(_thread=dead)
    assert not hooks.healthy()
    hooks.heartbeater = lambda: SimpleNamespace(_thread=None)  # not started yet
    assert hooks.healthy()


def test_the_watchdog_is_a_part_that_pings_from_the_first_ready_on():
    """The watchdog part starts with the master's other parts but sends nothing before READY=1;
    then WATCHDOG=1 with STATUS=; stopped, it closes the socket."""
    hooks, server = _hooks([SimpleNamespace(state=ChildState.IDLE)], [True], None)
    del hooks.ready  # the real one: it lets the watchdog begin

    async def scenario():
        loop = asyncio.get_running_loop()
        server.setblocking(False)
        hooks.watchdog.start()
        # Nothing before READY=1 (a bounded look, as _nothing_more: nothing is expected).
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(loop.sock_recv(server, 200), 0.3)
        hooks.ready()
        first = await asyncio.wait_for(loop.sock_recv(server, 200), 5)
        second = await asyncio.wait_for(loop.sock_recv(server, 200), 5)
        assert first.startswith(b"READY=1\nSTATUS=1/1 busy, 0 jobs done")
        assert second == b"WATCHDOG=1\nSTATUS=1/1 busy, 0 jobs done"
        await hooks.watchdog.stop()
        assert not hooks.watchdog.running and hooks.notify._sock is None
    try:
        asyncio.run(scenario())
    finally:
        server.close()
