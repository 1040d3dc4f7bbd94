"""SystemdHooks' decisions: when READY is sent, and when the watchdog ping is withheld."""

from __future__ import annotations

import socket
import threading
from types import SimpleNamespace

from jobrun.sdnotify import Notify
from jobrun.worker.sdnotify import SystemdHooks
from jobrun.worker.supervisor import ChildState


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
