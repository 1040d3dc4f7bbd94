"""What the master holds for one child process: its record (pid, socket, the jobs it holds)
and the non-blocking writes to its socket, and the job record (``Inflight``) it runs.

The record's ``state`` is read here and moved only by ``Children`` (worker/children.py), whose
table of moves is the one definition of what may follow what; the supervisor
(worker/supervisor.py) owns the process behind the record.
"""

from __future__ import annotations

import asyncio
import enum
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from jobrun import protocol
from jobrun.worker.forkserver import ForkedProcess


class ChildState(enum.Enum):
    """A child's state, as the master sees it (the table in this module's docstring)."""

    STARTING = "starting"
    STANDBY = "standby"  # ready, waiting for the child it replaces to finish its last job
    IDLE = "idle"
    RESERVED = "reserved"  # idle, with a claim running for it
    BUSY = "busy"
    RETIRING = "retiring"  # finishes what it holds, then exits
    EXITED = "exited"


@dataclass(slots=True)
class Inflight:
    """A job handed to a child: what the master needs to record its outcome."""

    id: int
    token: int
    task: str
    queue: str
    attempts: int
    max_attempts: int
    crashes: int
    created_at: float
    claimed: float  # monotonic: when this master claimed it (the lease's start)
    dispatched: float = 0.0  # monotonic: when its child started it (0 while it waits)
    traceparent: str | None = None  # the producer's, for the completion span's link
    timer: asyncio.TimerHandle | None = None
    # Runs beside other jobs in its child (--slots > 1 and a task that shares a child); any
    # job of a child with slots is interrupted by a frame, not a signal.
    shares: bool = False


@dataclass(eq=False)  # a process: equal only to itself, and usable as a key
class Child:
    index: int
    generation: int
    process: subprocess.Popen | ForkedProcess  # .pid (0 until forked), .wait()
    sock: socket.socket
    pidfd: int
    # Read through ``state``; moved only by Children (worker/children.py).
    _state: ChildState = ChildState.STARTING
    slots: int = 1  # jobs it runs at once, of tasks that share a child (--slots)
    # The jobs it runs, by id (Children.start / Children.end): one, unless it has slots.
    running: dict[int, Inflight] = field(default_factory=dict)
    # Jobs already written to its socket, behind ``running``, in the order it will start them.
    queued: deque[Inflight] = field(default_factory=deque)
    # A job claimed for it while it starts, with its frame: kept in the master (a job goes
    # only to a child that is ready) and written the moment its ready frame arrives.
    parked: tuple[Inflight, bytes] | None = None
    # --max-tasks-per-child: the child started to replace this one as it runs its last job,
    # and the other way round (dispatcher: successors).
    successor: "Child | None" = None
    predecessor: "Child | None" = None
    kill_reason: str | None = None  # why the master killed it: timeout | shutdown | fenced | unwritable
    kill_job: int | None = None  # the job it was killed for (with slots: others are released)
    ready: bool = False  # it reported ready once (its app loaded)
    rss: int = 0
    jobs_done: int = 0
    last_alive: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    _reader: protocol.FrameReader = field(default_factory=protocol.FrameReader)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Bytes written to the child's socket but not yet taken by it, and what to call when
    # that starts (the supervisor then writes the rest when the socket becomes writable).
    _outbox: bytearray = field(default_factory=bytearray)
    _on_backlog: Callable[["Child"], None] = lambda child: None

    @property
    def state(self) -> ChildState:
        return self._state

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def forked(self) -> bool:
        """Forked by the fork server (it is ready within milliseconds), not exec'd."""
        return isinstance(self.process, ForkedProcess)

    @property
    def job(self) -> Inflight | None:
        """A job it runs (the one, without slots), or None."""
        for job in self.running.values():
            return job
        return None

    def can_start(self, job: Inflight) -> bool:
        """Whether ``job``, next in its socket, starts now: the child's rule (child/slots.py),
        applied by the master to what it wrote. A job that does not share starts alone."""
        running = self.running
        if not running:
            return True
        if not job.shares or len(running) >= self.slots:
            return False
        return next(iter(running.values())).shares  # nothing starts beside one running alone

    def free_slots(self) -> int:
        """Jobs of tasks that share a child it would start at once, beside what it runs."""
        if self.slots == 1 or self.queued or self.parked is not None:
            return 0
        for job in self.running.values():
            if not job.shares:
                return 0
            break
        return self.slots - len(self.running)

    def held(self) -> int:
        return len(self.running) + len(self.queued) + (self.parked is not None)

    def holding(self) -> list[Inflight]:
        """Every job it holds: parked for it, running, or waiting in its socket."""
        jobs = [] if self.parked is None else [self.parked[0]]
        jobs.extend(self.running.values())
        jobs.extend(self.queued)
        return jobs

    def signal(self, signum: int) -> bool:
        """Send a signal if the child has not been reaped; safe from any thread."""
        with self._lock:
            if self.pidfd < 0:
                return False
            try:
                signal.pidfd_send_signal(self.pidfd, signum)
                return True
            except ProcessLookupError:
                return False

    def send(self, frame: bytes) -> bool:
        """Queue ``frame`` for the child and write what its socket takes now; the rest is
        written as the child reads (the socket is non-blocking, and a frame may be larger
        than its buffer). False if the socket is broken: the child cannot take frames."""
        if self._outbox:
            self._outbox += frame
            return True
        try:
            sent = self.sock.send(frame)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return False
        if sent < len(frame):
            self._outbox += memoryview(frame)[sent:]
            self._on_backlog(self)
        return True

    def flush(self) -> bool:
        """Write more of the queued frames; True once none is left. Raises OSError if the
        socket is broken."""
        try:
            sent = self.sock.send(self._outbox)
        except (BlockingIOError, InterruptedError):
            return False
        del self._outbox[:sent]
        return not self._outbox
