"""The fork server (``--spawn fork``): imports the app once, then forks children on request.

    master ──fork+exec──> jobrun-forkserver (single thread, app imported, gc frozen)
       ^                        │ clone(CLONE_PARENT) per request
       └──── parent of ─────── child N (jobrun.child.runtime.run_child)

The master starts it with fork+exec (``python -m jobrun.child.forkserver``) first thing in
``Master.run``, before its own threads and connections exist; being exec'd, it inherits none of
them whenever it starts (a restart by a master that has threads is just as clean). It runs one
thread and no event loop, opens no connection, and configures no logging: nothing it holds can
be half-locked in a fork.

**Why CLONE_PARENT.** Each child is created with the raw ``clone`` system call and the
``CLONE_PARENT`` flag: it is a copy of the fork server (the app already imported, its pages
shared copy-on-write), but its parent is the *master*. So to the master a forked child is
exactly what an exec'd one is: its own child process, whose pid is real, whose exit it reaps
with ``waitpid`` and sees at once through a pidfd, which it signals with
``pidfd_send_signal``, and whose PR_SET_PDEATHSIG fires when the master (not the fork server)
dies. The fork server's death does not touch the children at all: the master starts another
one and meanwhile spawns by exec. The alternatives were worse: a grandchild forked with
``os.fork`` cannot be waited on by the master (the exit status would have to travel back over
the control socket, and die with the fork server), and a double fork with the master as
subreaper makes the master reap every orphan of every handler. The system call is wrapped the
way ``os.fork`` wraps ``fork()``: ``PyOS_BeforeFork`` / ``PyOS_AfterFork_Child`` run the
interpreter's own at-fork work (locks reinitialised, ``os.register_at_fork`` hooks: random's
reseed, logging's handler locks, threading). glibc's own fork bookkeeping is skipped, which is
safe only because this process has exactly one thread (no lock can be held by another one);
so are handlers C libraries registered with ``pthread_atfork`` (docs/spawning.md says when
that matters: choose ``--spawn exec``).

**What a child finds.** Signals as an exec'd child of the master finds them: the fork server
empties its signal mask and sets the signals the master handles (protocol.MASTER_SIGNALS) to
their defaults first thing, before it imports the app (it was launched before the master's
handlers existed, so it may carry dispositions the master replaced: a shell's ignored SIGHUP
and SIGQUIT under ``nohup cmd &``), except its OWN_SIGNALS, which it ignores, as the child
runtime does too. Handlers and state the *app* created at import are kept: an exec'd child
has them too. In the child, the control socket is closed; ``random`` is reseeded (its at-fork
hook did already; ``random.seed()`` again keeps it true for an interpreter built without the
hook); the process title is the child's own.

**What a child costs.** A forked child writes to every page it touches that it shares with
the fork server (CPython's reference counts), and each first write is a copy-on-write fault.
What every child would build the same way (libc's prctl, the log capture and its handler) is
built here once, before ``gc.freeze``, and children start with it. The fork server pays the
same for what it writes while a child it forked still shares its pages: the clone call is
built once too, and the loop between two forks allocates as little as it can.

Control protocol (SOCK_SEQPACKET, one JSON message per packet):
    master -> server: {"t": "spawn", "index", "max_tasks", "max_memory", "soft_time_limit",
                       "alive_interval", "slots"} + the child's socket (SCM_RIGHTS)
                      {"t": "stop"} (or the socket closing): exit 0
    server -> master: {"t": "ready", "pid", "children": [[index, pid], ...]} once the app is
                      imported (else exit code 3); "children" are the first children, forked
                      at once for the sockets passed at exec (--initial-fds), without a request
                      {"t": "spawned", "pid"} | {"t": "error", "error"}
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import gc
import json
import os
import random
import signal
import socket
import sys
from typing import Any

from setproctitle import setproctitle

from jobrun import protocol, tracing
from jobrun.app import App
from jobrun.child.capture import LogCapture
from jobrun.child.clone import CLONE_PARENT, SYS_CLONE, machine
from jobrun.child.runtime import die_with_parent, load_app_or_exit, preload, run_child

MAX_MESSAGE = 4096
OWN_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # dispositions the fork server sets for itself


class _Clone:
    """The system call and the interpreter's fork hooks as ctypes functions, with their
    arguments, built once (``clone_call``): everything the fork server writes after a fork, to
    memory it still shares with the child, costs it a copy-on-write fault, so the fork itself
    allocates nothing."""

    def __init__(self) -> None:
        libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held across the call
        self.syscall = libc.syscall
        self.syscall.restype = ctypes.c_long
        api = ctypes.pythonapi
        self.before, self.after_child, self.after_parent = (
            api.PyOS_BeforeFork, api.PyOS_AfterFork_Child, api.PyOS_AfterFork_Parent)
        self.args = (ctypes.c_long(SYS_CLONE[machine()]),
                     ctypes.c_ulong(CLONE_PARENT | signal.SIGCHLD),
                     ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


@functools.cache
def clone_call() -> _Clone:
    return _Clone()


def fork_as_sibling() -> int:
    """Fork this (single-threaded) process; the new process's parent is this one's parent.
    Returns 0 in the child and the child's pid here, like ``os.fork``."""
    c = clone_call()
    c.before()
    pid = c.syscall(*c.args)
    if pid == 0:
        c.after_child()
        return 0
    err = ctypes.get_errno()
    c.after_parent()
    if pid < 0:
        raise OSError(err, os.strerror(err))
    return pid


def _become_child(app: App, spec: str, control: socket.socket, fd: int, request: dict[str, Any],
                  master_pid: int, capture: LogCapture | None = None) -> None:
    """In the forked process: drop what belongs to the fork server, then serve. Never returns."""
    try:
        control.close()
        index = int(request["index"])
        die_with_parent(master_pid)  # the parent is the master (CLONE_PARENT)
        random.seed()
        setproctitle(f"jobrun-child {index}: starting")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
        run_child(app, spec, sock, index, master_pid, max_tasks=int(request["max_tasks"]),
                  max_memory=int(request["max_memory"]), slots=int(request.get("slots", 1)),
                  soft_time_limit=float(request["soft_time_limit"]),
                  alive_interval=float(request["alive_interval"]), capture=capture)
    finally:
        os._exit(1)  # run_child leaves through os._exit; this only catches a failure before it


def _reply(control: socket.socket, obj: dict[str, Any]) -> None:
    control.send(json.dumps(obj).encode())


def fork_initial(app: App, spec: str, control: socket.socket, master_pid: int,
                 fds: list[int], request: dict[str, Any],
                 capture: LogCapture | None = None) -> list[list[int]]:
    """Fork the first children (index 1, 2, ...) for the sockets the master passed at exec:
    they start while the master is still importing and connecting, and it adopts them."""
    forked = []
    for index, fd in enumerate(fds, 1):
        try:
            pid = fork_as_sibling()
        except OSError:
            os.close(fd)  # the master spawns that one by request instead
            continue
        if pid == 0:
            for other in fds[index:]:
                os.close(other)
            _become_child(app, spec, control, fd, {**request, "index": index}, master_pid,
                          capture)
        os.close(fd)
        forked.append([index, pid])
    return forked


def serve(app: App, spec: str, control: socket.socket, master_pid: int,
          capture: LogCapture | None = None) -> None:
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(control, MAX_MESSAGE, 1)
        except (ConnectionResetError, OSError):
            return
        if not message:
            return  # the master closed the control socket (it stopped, or retired us)
        request = json.loads(message)
        if request.get("t") == "stop":
            return
        if request.get("t") != "spawn" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            _reply(control, {"t": "error", "error": "a spawn request carries exactly one socket"})
            continue
        try:
            pid = fork_as_sibling()
        except OSError as exc:
            os.close(fds[0])
            _reply(control, {"t": "error", "error": f"clone failed: {exc}"})
            continue
        if pid == 0:
            _become_child(app, spec, control, fds[0], request, master_pid, capture)
        os.close(fds[0])
        control.send(b'{"t": "spawned", "pid": %d}' % pid)  # (no json.dumps: see _Clone)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="jobrun-forkserver")
    parser.add_argument("--fd", type=int, required=True, help="the control socket")
    parser.add_argument("--app", required=True)
    parser.add_argument("--master-pid", type=int, required=True)
    parser.add_argument("--generation", type=int, default=0)
    parser.add_argument("--initial-fds", default="", help="comma-separated: a socket for each"
                        " of the first children, forked as soon as the app is imported")
    parser.add_argument("--initial-request", default="{}", help="JSON: their spawn settings")
    args = parser.parse_args(argv)
    initial = [int(fd) for fd in args.initial_fds.split(",") if fd]

    die_with_parent(args.master_pid)
    # Signals as an exec'd child of the master finds them, set before the app's import (which
    # may set its own, kept, as an exec'd child keeps them), so that a forked child has
    # nothing to reset. ^C and a service manager's group-wide TERM belong to the master: the
    # fork server ignores them, as the child runtime does.
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for name in protocol.MASTER_SIGNALS:
        signum = getattr(signal, "SIG" + name)
        signal.signal(signum, signal.SIG_IGN if signum in OWN_SIGNALS else signal.SIG_DFL)
    setproctitle(f"jobrun-forkserver: {args.app} generation={args.generation}")
    control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=args.fd)
    app = load_app_or_exit(args.app, "jobrun-forkserver")
    preload(app)
    capture = LogCapture(capture_print=app.capture_print)  # every child's, built once
    clone_call()
    sys.stdout.flush()  # what the app printed at import, or each child would write it again
    sys.stderr.flush()
    # What the import and preload built stays put: the collector never walks (and so never
    # writes to) the objects every child shares, so their pages stay shared copy-on-write.
    gc.collect()
    gc.freeze()
    try:
        children = fork_initial(app, args.app, control, args.master_pid, initial,
                                json.loads(args.initial_request), capture) if initial else []
        _reply(control, {"t": "ready", "pid": os.getpid(), "children": children})
        # Not on the way to the first children: what a traced job needs (its import would
        # otherwise cost every later child that runs one), kept out of the collector's walk.
        tracing.load()
        gc.freeze()
        serve(app, args.app, control, args.master_pid, capture)
    finally:
        sys.stderr.flush()
        os._exit(protocol.EXIT_OK)


if __name__ == "__main__":
    main()
