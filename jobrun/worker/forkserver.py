"""The master's side of the fork server (``--spawn fork``; the server is jobrun/child/forkserver.py).

    jobrun-master (its command line, first) ──launch──> fork server (generation 0)
    Master.run ──attach── ... ──ready──> dispatcher starts, spawns
    supervisor.spawn ──request + socket (SCM_RIGHTS)──> server ──clone──> child (the master's own)
    server dies ──> forkserver.died; children keep running; spawns go by exec until a new
                    server is ready (restarted at once, with a back-off if it keeps dying)
    SIGHUP ──> a new server imports the new code; ready: it replaces the old one, then the
               dispatcher starts the new generation | it fails: reload.failed, the old one serves

Every child, forked or exec'd, is the master's own child process (the server forks with
CLONE_PARENT: see its module), so the supervisor waits on, signals and reaps both kinds alike;
a forked one is a ``ForkedProcess``, the ``subprocess.Popen`` stand-in this module provides.

A spawn is one request and one reply over a SOCK_SEQPACKET socketpair. The event loop does
not wait for the reply (the fork takes the server a millisecond or more, which the master
spends on its other children and its claims): replies come back in request order and each
completes its spawn (``done(pid)``); a server that does not answer within SPAWN_TIMEOUT is
killed and replaced, and the spawns it still owed are started by exec (``done(None)``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from jobrun.logs import event
from jobrun.policy import alive_interval
from jobrun.worker.exits import describe_exit

if TYPE_CHECKING:  # pragma: no cover
    from jobrun.config import Settings

    import asyncio  # imported where used: the command line launches a server before it

log = logging.getLogger("jobrun.master")
SPAWN_TIMEOUT = 5.0
MAX_MESSAGE = 4096
RESTART_CAP = 10.0  # most seconds between restarts of a fork server that keeps dying
STABLE = 5.0  # a server that served this long resets the back-off


class ForkServerError(Exception):
    pass


class ForkedProcess:
    """A child the fork server forked: the master's own child, waited on like a Popen."""

    def __init__(self, pid: int = 0) -> None:
        self.pid = pid  # 0 until the fork server answered
        self.returncode: int | None = None

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class ForkServer:
    """One fork server process: started by fork+exec, ready once it imported the app.

    ``launch`` starts the process and needs no event loop (the master's command line launches
    the first one before it imports or connects anything: docs/spawning.md); ``attach`` then
    watches it from the loop. Its ready message waits in the socket until then."""

    def __init__(self, app: str, env: dict[str, str], generation: int) -> None:
        self.app = app
        self.env = env
        self.generation = generation
        self.ready = False
        self.ready_at = 0.0
        self.exited = False
        self.attached = False
        self._initial: dict[int, socket.socket] = {}  # index -> socket: first children
        self._adoptable: dict[int, tuple[int, socket.socket]] = {}  # index -> (pid, socket)
        self._owed: deque[Callable[[int | None], None]] = deque()  # spawns awaiting a reply
        self._overdue: asyncio.TimerHandle | None = None

    def launch(self, initial: int = 0, request: dict[str, Any] | None = None) -> "ForkServer":
        """Start it; with ``initial``, it forks that many first children (index 1, 2, ...,
        spawn settings ``request``) as soon as the app is imported, each serving a socket
        passed now, and ``adopt`` hands them to the supervisor once they are reported."""
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(initial)]
        self._initial = {index: ours for index, (ours, _) in enumerate(pairs, 1)}
        try:
            fd = theirs.fileno()
            fds = [child_end.fileno() for _, child_end in pairs]
            cmd = [sys.executable, "-m", "jobrun.child.forkserver", "--fd", str(fd),
                   "--app", self.app, "--master-pid", str(os.getpid()),
                   "--generation", str(self.generation)]
            if fds:
                cmd += ["--initial-fds", ",".join(map(str, fds)),
                        "--initial-request", json.dumps(request or {})]
            # Started from the event-loop (main) thread, like children: its PR_SET_PDEATHSIG,
            # and that of every child it forks, follows that thread.
            self.popen = subprocess.Popen(cmd, pass_fds=[fd, *fds], env=self.env,
                                          stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
            for _, child_end in pairs:
                child_end.close()
        self.control.settimeout(SPAWN_TIMEOUT)
        self.started = time.monotonic()
        self.pidfd = os.pidfd_open(self.popen.pid)
        return self

    def attach(self, loop: asyncio.AbstractEventLoop, on_ready: Callable[["ForkServer"], None],
               on_exit: Callable[["ForkServer", int], None]) -> None:
        self.loop = loop
        self.on_ready = on_ready
        self.on_exit = on_exit
        import asyncio

        self.attached = True
        self.gone = asyncio.Event()
        self.loop.add_reader(self.control.fileno(), self._readable)
        self.loop.add_reader(self.pidfd, self._exited)

    def adopt(self, index: int) -> tuple[int, socket.socket] | None:
        """(pid, socket) of the first child of that index it forked by itself, once."""
        return self._adoptable.pop(index, None)

    def _close_initial(self) -> None:
        for sock in self._initial.values():
            sock.close()
        self._initial.clear()

    def drop_unadopted(self) -> None:
        """First children the master did not want (fewer than asked): stopped and reaped."""
        for pid, sock in self._adoptable.values():
            sock.close()
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self._adoptable.clear()

    def abandon(self) -> None:
        """Kill and reap a launched server that was never attached (the master did not start)."""
        self.popen.kill()
        self.popen.wait()
        os.close(self.pidfd)
        self.control.close()
        self._close_initial()

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _readable(self) -> None:
        try:
            data = self.control.recv(MAX_MESSAGE, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # it is exiting: its pidfd reports how
            self.loop.remove_reader(self.control.fileno())
            return
        answer = json.loads(data)
        kind = answer.get("t")
        if kind == "ready" and not self.ready:
            self.ready = True
            self.ready_at = time.monotonic()
            for index, pid in answer.get("children", ()):
                sock = self._initial.pop(index, None)
                if sock is not None:
                    self._adoptable[index] = (pid, sock)
            self._close_initial()  # sockets of first children it could not fork
            self.on_ready(self)
        elif kind in ("spawned", "error") and self._owed:
            done = self._owed.popleft()
            self._watch_overdue()
            if kind == "spawned":
                done(int(answer["pid"]))
            else:
                event(log, logging.ERROR, "forkserver.spawn_failed", pid=self.pid,
                      error=str(answer.get("error")), note="this child is started by exec")
                done(None)

    def _exited(self) -> None:
        self.loop.remove_reader(self.pidfd)
        try:
            self.loop.remove_reader(self.control.fileno())
        except (ValueError, OSError):
            pass
        status = self.popen.wait()
        os.close(self.pidfd)
        self.control.close()
        self.ready = False
        self.exited = True
        self.gone.set()
        self._fail_owed()
        self.on_exit(self, status)

    def _fail_owed(self) -> None:
        """The spawns it will never answer: each is started by exec."""
        if self._overdue is not None:
            self._overdue.cancel()
            self._overdue = None
        while self._owed:
            self._owed.popleft()(None)

    def _watch_overdue(self) -> None:
        if self._overdue is not None:
            self._overdue.cancel()
            self._overdue = None
        if self._owed:
            self._overdue = self.loop.call_later(SPAWN_TIMEOUT, self._no_answer)

    def _no_answer(self) -> None:
        self._overdue = None
        event(log, logging.ERROR, "forkserver.spawn_failed", pid=self.pid,
              error=f"no answer within {SPAWN_TIMEOUT:g}s",
              note="killing it; the children it owes are started by exec")
        self.ready = False
        self.kill()
        self._fail_owed()

    def spawn(self, sock: socket.socket, request: dict[str, Any],
              done: Callable[[int | None], None]) -> None:
        """Ask the server to fork a child that serves ``sock``; ``done(pid)`` once it has,
        ``done(None)`` if it will not (start that child by exec). Raises ForkServerError if
        the request cannot be sent."""
        try:
            socket.send_fds(self.control, [json.dumps({"t": "spawn", **request}).encode()],
                            [sock.fileno()])
        except OSError as exc:  # a timeout included
            raise ForkServerError(f"cannot send: {exc or type(exc).__name__}") from None
        self._owed.append(done)
        if self._overdue is None:
            self._watch_overdue()

    def retire(self) -> None:
        """Ask it to exit (the children it forked are the master's and keep running)."""
        if not self.exited:
            try:
                self.control.send(b'{"t": "stop"}')
            except OSError:
                self.kill()

    def kill(self) -> None:
        if not self.exited:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except (ProcessLookupError, OSError):
                pass


class ForkServers:
    """The fork server the supervisor spawns through: its start, restarts and reloads. A part
    of the master (lifecycle.Part): started first, before any thread or connection of the
    master, and stopped last."""

    name = "forkservers"

    def __init__(self, loop: asyncio.AbstractEventLoop, app: str, env: dict[str, str],
                 on_died: Callable[[], None] = lambda: None,
                 launched: ForkServer | None = None) -> None:
        self.loop = loop
        self.launched = launched  # the first server, launched before the loop ran
        self.app = app
        self.env = env
        self.on_died = on_died  # for a metric
        self.current: ForkServer | None = None
        self.pending: ForkServer | None = None  # a reload's server, until it is ready
        self._reload_done: Callable[[bool], None] | None = None
        self._generation = 0
        self._failures = 0  # restarts in a row of a server that did not serve for long
        self._restart: asyncio.TimerHandle | None = None
        self._boot: asyncio.Future[int | None] = loop.create_future()
        self.closing = False

    def _new(self) -> ForkServer:
        server = ForkServer(self.app, self.env, self._generation).launch()
        self._generation += 1
        server.attach(self.loop, self._ready, self._exit)
        return server

    def start(self) -> None:
        launched, self.launched = self.launched, None
        if launched is None:
            self.current = self._new()
            return
        self._generation = launched.generation + 1
        launched.attach(self.loop, self._ready, self._exit)
        self.current = launched

    async def booted(self) -> int | None:
        """None once the first server is ready; else the exit status it died with."""
        return await self._boot

    def adopt(self, index: int) -> tuple[int, socket.socket] | None:
        """A first child the server forked by itself at start, if it has one of ``index``."""
        server = self.current
        return None if server is None else server.adopt(index)

    def drop_unadopted(self) -> None:
        if self.current is not None:
            self.current.drop_unadopted()

    def spawn(self, sock: socket.socket, request: dict[str, Any],
              done: Callable[[int | None], None]) -> bool:
        """Have a child forked to serve ``sock`` (``done(pid)``, or ``done(None)``: exec it
        after all); False when no server is ready (exec it now)."""
        server = self.current
        if server is None or not server.ready:
            return False
        try:
            server.spawn(sock, request, done)
            return True
        except ForkServerError as exc:
            event(log, logging.ERROR, "forkserver.spawn_failed", pid=server.pid, error=str(exc),
                  note="killing it; this child is started by exec")
            server.ready = False
            server.kill()
            return False

    def reconfigure(self, settings: Settings) -> None:
        """Nothing: the app and the environment stay those the master started with (a SIGHUP
        starts a new server through ``reload``, which imports the code as it is now)."""

    def reload(self, done: Callable[[bool], None]) -> None:
        """Start a server with the code as it is now; ``done(ok)`` once it is ready or dead."""
        if self.pending is not None:  # a newer SIGHUP wins
            self.pending.kill()
        self._reload_done = done
        self.pending = self._new()

    def _ready(self, server: ForkServer) -> None:
        event(log, logging.INFO, "forkserver.ready", pid=server.pid, generation=server.generation,
              took=round(server.ready_at - server.started, 3))
        if server is self.pending:
            old, self.current, self.pending = self.current, server, None
            if old is not None:
                old.drop_unadopted()
                old.retire()
            self._finish_reload(True)
        elif server is not self.current:
            server.retire()  # superseded while it was importing
        if not self._boot.done():
            self._boot.set_result(None)

    def _exit(self, server: ForkServer, status: int) -> None:
        what, _ = describe_exit(status)
        if server is self.pending:
            self.pending = None
            event(log, logging.ERROR, "forkserver.start_failed", pid=server.pid,
                  generation=server.generation, status=what)
            self._finish_reload(False)
            return
        if server is not self.current:
            return  # retired after a reload, or superseded: expected
        server.drop_unadopted()
        self.current = None
        if not self._boot.done():
            self._boot.set_result(status)
            return
        if self.closing:
            return
        self.on_died()
        if server.ready_at and time.monotonic() - server.ready_at >= STABLE:
            self._failures = 0
        delay = 0.0 if self._failures == 0 else min(RESTART_CAP, 0.5 * 2 ** self._failures)
        self._failures += 1
        event(log, logging.ERROR, "forkserver.died", pid=server.pid, status=what,
              restart_in=delay, note="its children keep running; children are started by exec"
                                     " until a new fork server is ready")
        self._restart = self.loop.call_later(delay, self._restart_now)

    def _restart_now(self) -> None:
        self._restart = None
        if not self.closing and self.current is None:
            self.current = self._new()

    def _finish_reload(self, ok: bool) -> None:
        done, self._reload_done = self._reload_done, None
        if done is not None:
            done(ok)

    async def stop(self, timeout: float | None = 5.0) -> None:
        """Retire every server and wait for them to exit (safe twice)."""
        import asyncio

        self.closing = True
        if self.launched is not None:  # never attached: the master stopped before it started
            self.launched.abandon()
            self.launched = None
        self.drop_unadopted()
        if self._restart is not None:
            self._restart.cancel()
        servers = [s for s in (self.current, self.pending) if s is not None and not s.exited]
        for server in servers:
            server.retire()
        if servers:
            waiting = asyncio.gather(*(s.gone.wait() for s in servers))
            try:
                await asyncio.wait_for(waiting, timeout)
            except asyncio.TimeoutError:
                for server in servers:
                    server.kill()


def child_limits(settings: Settings) -> dict[str, Any]:
    """What every child starts with, forked or exec'd, in the keys of a spawn request: its
    --max-tasks-per-child, --max-memory-per-child in bytes, --soft-time-limit, and how often a
    busy child says it still runs (policy.alive_interval). The master's first children (forked
    as the fork server starts) and those its supervisor spawns later start alike."""
    return {"max_tasks": settings.max_tasks_per_child, "slots": settings.slots,
            "max_memory": settings.max_memory_per_child * 1024 * 1024,
            "soft_time_limit": settings.soft_time_limit,
            "alive_interval": alive_interval(settings.lease_ttl)}


def child_env(dsn: str, schema: str) -> dict[str, str]:
    """The environment of the fork server and every child (forked ones inherit the server's)."""
    env = dict(os.environ)
    env["JOBRUN_DATABASE_URL"] = dsn  # for transactional handlers; never in argv
    env["JOBRUN_SCHEMA"] = schema
    return env
