"""Child processes: the only module that starts, signals, kills or waits on them.

Children are never a bare ``os.fork()`` of the master: by then the master has a heartbeat
thread and open libpq sockets, and a forked copy would inherit held locks and share those
sockets. A child is either forked by the fork server (``--spawn fork``, the default: a
single-threaded process that imported the app once, worker/forkserver.py) or started by
fork+exec (``--spawn exec``, and the fallback while no fork server is ready: ``Popen`` of
``python -m jobrun.child``, whose C fast path execs right after fork, so no Python code runs
in between). Each child gets one end of a socketpair and nothing else. Either way the child
is the master's own child process (the fork server forks with CLONE_PARENT), so what follows
holds for both kinds.

Exits are seen through a pidfd registered with the event loop (readable when the process
ends), so a child killed by a signal is noticed at once, and signals go through
``pidfd_send_signal``, so a recycled pid can never be hit by mistake.

A child's state is not this module's: ``Children`` (worker/children.py) owns it and the
register of alive children; the supervisor adds each child it spawns, retires one it asks to
stop and reports its exit there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any, Callable

from jobrun import protocol
from jobrun.logs import event
from jobrun.worker.child import Child, ChildState
from jobrun.worker.children import Children
from jobrun.worker.forkserver import ForkedProcess, ForkServers

log = logging.getLogger("jobrun.supervisor")


class Supervisor:
    """Starts children and reports their frames and exits to the master's callbacks."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, app: str, max_tasks: int,
                 max_memory: int, soft_time_limit: float, alive_interval: float,
                 slots: int = 1,
                 env: dict[str, str], forkservers: ForkServers | None = None,
                 on_frame: Callable[[Child, dict[str, Any]], None],
                 on_exit: Callable[[Child, int], None], children: Children | None = None) -> None:
        self.loop = loop
        self.app = app
        self.configure(max_tasks=max_tasks, max_memory=max_memory, slots=slots,
                       soft_time_limit=soft_time_limit, alive_interval=alive_interval)
        self.env = env
        self.forkservers = forkservers  # None: every child by exec
        self.on_frame = on_frame
        self.on_exit = on_exit
        self.children = Children() if children is None else children

    def configure(self, *, max_tasks: int, max_memory: int, soft_time_limit: float,
                  alive_interval: float, slots: int = 1) -> None:
        """What children started from now on start with (forkserver.child_limits)."""
        self.max_tasks = max_tasks
        self.slots = slots
        self.max_memory = max_memory  # bytes
        self.soft_time_limit = soft_time_limit
        self.alive_interval = alive_interval

    def spawn(self, index: int, generation: int) -> Child:
        """A new child, counted at once. A forked one is asked of the fork server and is
        watched (its frames read, its exit seen) once the server answers with its pid: the
        event loop does not wait for the fork. Until then it cannot be signalled; a kill
        asked for meanwhile is sent when its pid is known."""
        if self.forkservers is not None:
            adopted = self.forkservers.adopt(index) if generation == 0 else None
            if adopted is not None:  # forked by the fork server as it started: see launch
                pid, sock = adopted
                sock.setblocking(False)
                child = Child(index=index, generation=generation, process=ForkedProcess(pid),
                              sock=sock, pidfd=-1, _on_backlog=self._write_later, slots=self.slots)
                self.children.add(child)
                self._watch(child)
                return child
            parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            parent_sock.setblocking(False)  # the event loop writes and reads it as it can
            child = Child(index=index, generation=generation, process=ForkedProcess(),
                          sock=parent_sock, pidfd=-1, _on_backlog=self._write_later, slots=self.slots)
            try:
                asked = self.forkservers.spawn(child_sock, {
                    "index": index, "max_tasks": self.max_tasks, "max_memory": self.max_memory,
                    "slots": self.slots,
                    "soft_time_limit": self.soft_time_limit, "alive_interval": self.alive_interval},
                    lambda pid: self._forked(child, pid))
            finally:
                child_sock.close()
            if asked:
                self.children.add(child)
                return child
            parent_sock.close()
        child = Child(index=index, generation=generation, process=None, sock=None, pidfd=-1,
                      _on_backlog=self._write_later, slots=self.slots)
        self.children.add(child)
        self._start_by_exec(child)
        return child

    def _forked(self, child: Child, pid: int | None) -> None:
        if pid is None:  # the fork server failed it: a child it may have forked all the same
            if child._outbox:
                self.loop.remove_writer(child.sock.fileno())
                child._outbox.clear()
            child.sock.close()  # must not share the exec'd one's socket (it reads EOF, exits)
            self._start_by_exec(child)
            return
        child.process.pid = pid
        self._watch(child)

    def _start_by_exec(self, child: Child) -> None:
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            child.process = self._exec(child_sock, child.index)
        finally:
            child_sock.close()
        parent_sock.setblocking(False)  # the event loop writes and reads it as it can
        child.sock = parent_sock
        self._watch(child)

    def _watch(self, child: Child) -> None:
        """Read its frames and see its exit, from now on."""
        with child._lock:
            child.pidfd = os.pidfd_open(child.pid)
        self.loop.add_reader(child.sock.fileno(), self._readable, child)
        self.loop.add_reader(child.pidfd, self._exited, child)
        if child.kill_reason is not None:
            child.signal(signal.SIGKILL)

    def _exec(self, child_sock: socket.socket, index: int) -> subprocess.Popen:
        fd = child_sock.fileno()
        cmd = [sys.executable, "-m", "jobrun.child", "--fd", str(fd), "--index", str(index),
               "--app", self.app, "--master-pid", str(os.getpid()),
               "--max-tasks", str(self.max_tasks), "--max-memory", str(self.max_memory),
               "--soft-time-limit", str(self.soft_time_limit), "--slots", str(self.slots),
               "--alive-interval", str(self.alive_interval)]
        # Spawned from the event-loop (main) thread: PR_SET_PDEATHSIG fires when the
        # *thread* that created the child ends, so it must be the long-lived one.
        return subprocess.Popen(cmd, pass_fds=[fd], env=self.env, stdin=subprocess.DEVNULL)

    def _readable(self, child: Child) -> None:
        try:
            data = child.sock.recv(65536, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            # EOF: the child is exiting; its pidfd reports the status.
            self.loop.remove_reader(child.sock.fileno())
            return
        try:
            frames = child._reader.feed(data)
        except ValueError:
            event(log, logging.ERROR, "child.protocol_error", child=child.index, pid=child.pid)
            self.kill(child, "protocol")
            return
        child.last_alive = time.monotonic()
        for body in frames:
            self.on_frame(child, protocol.decode(body))

    def _write_later(self, child: Child) -> None:
        self.loop.add_writer(child.sock.fileno(), self._writable, child)

    def _writable(self, child: Child) -> None:
        try:
            done = child.flush()
        except OSError as exc:
            self.loop.remove_writer(child.sock.fileno())
            event(log, logging.ERROR, "child.unwritable", child=child.index, pid=child.pid,
                  pending=len(child._outbox), error=str(exc), note="replacing the child")
            child._outbox.clear()
            self.kill(child, "unwritable")
            return
        if done:
            self.loop.remove_writer(child.sock.fileno())

    def _exited(self, child: Child) -> None:
        self.loop.remove_reader(child.pidfd)
        if child._outbox:
            self.loop.remove_writer(child.sock.fileno())
            child._outbox.clear()
        # Drain what the child wrote before it died (a result sent just before exiting).
        if child.state is not ChildState.EXITED:
            try:
                while True:
                    data = child.sock.recv(65536, socket.MSG_DONTWAIT)
                    if not data:
                        break
                    for body in child._reader.feed(data):
                        self.on_frame(child, protocol.decode(body))
            except (OSError, ValueError):
                pass
        try:
            self.loop.remove_reader(child.sock.fileno())
        except (ValueError, OSError):
            pass
        status = child.process.wait()
        with child._lock:
            os.close(child.pidfd)
            child.pidfd = -1
        child.sock.close()
        self.children.discard(child)
        try:
            self.on_exit(child, status)
        finally:
            self.children.exited(child)

    def kill(self, child: Child, reason: str) -> None:
        if child.kill_reason is None:
            child.kill_reason = reason
        child.signal(signal.SIGKILL)

    def stop(self, child: Child) -> None:
        """Ask a child to exit after the jobs it holds (if any)."""
        self.children.retire(child)
        if child.job is None and not child.queued:
            child.send(protocol.encode({"t": "stop"}))

    def alive(self) -> list[Child]:
        return self.children.alive()
