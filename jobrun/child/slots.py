"""Slots: a child that runs several jobs at once (``--slots`` N > 1).

A job of a task that shares a child (an ``async def`` handler, or a plain one declared
``slots=True``) runs beside others: an async handler as a task on the child's event loop, a
plain one on the child's thread pool. A job of any other task (or of a task the child does not
know) keeps the child to itself: it starts once every running job ended, the same way (a task
or a pool thread), and no job starts beside it. Frames are taken in order: a job starts when
the one before it started and there is room, so the master, applying the same rule to what it
wrote (worker/child.py ``Child.can_start``), knows which jobs run and which wait.

Each job keeps its own: lease token, log buffer (capture.py's context variable), soft time
limit (a timer on the loop) and interrupt. The master interrupts one job by a frame, not a
signal (a signal would reach whichever job the main thread runs)::

    master -> child: {"t": "interrupt", "id", "token", "why": "lease_lost" | "cancel" | "timeout"}

An async job is cancelled; a thread is sent the exception asynchronously
(``PyThreadState_SetAsyncExc``), which it sees at its next Python instruction: a thread
blocked in C (a socket read) sees nothing until that returns, and the master kills the child
once the job's grace has passed (its other jobs are then released, not failed).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import os
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from setproctitle import setproctitle

from jobrun import protocol
from jobrun.app import Job, TaskDef
from jobrun.child.memory import rss_bytes
from jobrun.child.outcomes import HardTimeLimit, failure, interrupted, raised, returned
from jobrun.errors import Cancelled, InvalidInput, LeaseLost, SoftTimeLimit
from jobrun.policy import SUCCEEDED, run_time_average, should_recycle
from jobrun.tracing import attempt_span

if TYPE_CHECKING:  # pragma: no cover
    from jobrun.child.runtime import ChildRuntime


_WHY = {"lease_lost": LeaseLost, "cancel": Cancelled, "timeout": HardTimeLimit}


@dataclass(eq=False)
class Slot:
    """One job running beside others."""

    frame: dict[str, Any]
    job: Job
    task: TaskDef
    started: float
    handle: asyncio.Task | None = None  # an async job's task
    thread: int | None = None  # a thread job's thread, while its handler runs
    pending: type[BaseException] | None = None  # what interrupts it
    lock: threading.Lock = field(default_factory=threading.Lock)
    soft: asyncio.TimerHandle | None = None


def _raise_in_thread(ident: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident),
                                               ctypes.py_object(exc) if exc else None)


class SlotRunner:
    """Serves the master with up to ``slots`` jobs at once (see the module's docstring)."""

    def __init__(self, runtime: "ChildRuntime", slots: int) -> None:
        self.rt = runtime
        self.slots = slots
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="jobrun-slot")
        self.pending: deque[tuple[dict[str, Any], str | None]] = deque()
        self.running: dict[int, Slot] = {}
        self.exclusive = False
        self.recycling: str | None = None
        self.done = asyncio.Event()
        self._flush_due = False

    # --- the loop -------------------------------------------------------------------------

    def serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.rt._title = self._title  # the ticker thread renders this one
        self._title()
        reader = protocol.FrameReader()
        fd = self.rt.sock.fileno()

        def readable() -> None:
            try:
                data = self.rt.sock.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if not data:  # the master is gone
                self.loop.remove_reader(fd)
                self.done.set()
                return
            for raw in reader.feed(data):
                frame, undecodable = protocol.decode_job(raw)
                kind = frame.get("t")
                if kind == "interrupt":
                    self._interrupt(frame)
                elif kind in ("job", "stop"):
                    self.pending.append((frame, undecodable))
                else:
                    os._exit(protocol.EXIT_PROTOCOL_ERROR)
            self._pump()

        self.loop.add_reader(fd, readable)
        try:
            self.loop.run_until_complete(self.done.wait())
        finally:
            self.rt.flush()

    def _pump(self) -> None:
        """Start the jobs that may start now, in the order they came."""
        while self.pending and not self.recycling:
            frame, undecodable = self.pending[0]
            if frame.get("t") == "stop":
                if not self.running:
                    self.pending.popleft()
                    self.done.set()
                return
            task = self.rt.app.tasks.get(frame.get("task"))
            shares = task is not None and task.shares_child
            if self.running and (not shares or self.exclusive or len(self.running) >= self.slots):
                return
            self.pending.popleft()
            if task is None or undecodable is not None:  # it starts, and ends at once
                self._deliver(frame, self.rt.unrunnable(frame, undecodable), time.monotonic())
                continue
            self._start(frame, task, alone=not shares)

    def _start(self, frame: dict[str, Any], task: TaskDef, alone: bool) -> None:
        job = self.rt.job_of(frame)
        slot = Slot(frame, job, task, time.monotonic())
        self.running[job.id] = slot
        self.exclusive = alone
        self.rt._current = (job, slot.started)
        soft = task.soft_time_limit or self.rt.default_soft_limit
        if soft:
            slot.soft = self.loop.call_later(soft, self._interrupt_slot, slot, SoftTimeLimit)
        if task.is_async:
            slot.handle = self.loop.create_task(self._run_async(slot))
        else:
            ctx = contextvars.copy_context()
            future = self.loop.run_in_executor(self.pool, ctx.run, self._run_thread, slot)
            future.add_done_callback(lambda f: self._ended(slot, f.result()))

    # --- one job --------------------------------------------------------------------------

    async def _run_async(self, slot: Slot) -> None:
        with self.rt.capture.attempt() as log, \
                attempt_span(slot.job, slot.frame.get("traceparent")) as span:
            try:
                result = returned(await slot.task.fn(slot.job))
            except asyncio.CancelledError:
                result = interrupted(slot.pending()) if slot.pending else failure(
                    InvalidInput("the job's task was cancelled"))
            except BaseException as exc:  # noqa: BLE001 - any handler failure is an outcome
                result = raised(exc)
            span(result)
            result["log"] = log.text()
        self._ended(slot, result)

    def _run_thread(self, slot: Slot) -> dict[str, Any]:
        """In a pool thread (in a copy of the loop's context): the handler, and its outcome."""
        with self.rt.capture.attempt() as log, \
                attempt_span(slot.job, slot.frame.get("traceparent")) as span:
            try:
                try:
                    with slot.lock:
                        slot.thread = threading.get_ident()
                    if slot.task.transactional:  # commits its effects with its outcome
                        text, skipped = self.rt.effects.run(
                            slot.task, slot.job, slot.frame.get("owner", ""), log.text)
                        result = {"outcome": SUCCEEDED, "result": text, "recorded": True,
                                  "effects_skipped": skipped}
                    else:
                        result = returned(slot.task.fn(slot.job))
                finally:
                    with slot.lock:
                        slot.thread = None
                        _raise_in_thread(threading.get_ident(), None)  # one sent too late
            except BaseException as exc:  # noqa: BLE001 - any handler failure is an outcome
                result = raised(exc)
            span(result)
            if not result.get("recorded"):
                result["log"] = log.text()
        return result

    def _ended(self, slot: Slot, result: dict[str, Any]) -> None:
        if slot.soft is not None:
            slot.soft.cancel()
        self.running.pop(slot.job.id, None)
        if not self.running:
            self.rt._current = None
            self.exclusive = False
        self._deliver(slot.frame, result, slot.started)
        self._pump()
        if self.recycling and not self.running:
            self.done.set()

    def _deliver(self, frame: dict[str, Any], result: dict[str, Any], started: float) -> None:
        rt = self.rt
        done = time.monotonic()
        task = frame.get("task")
        rt._took[task] = run_time_average(rt._took.get(task), done - started)
        rt.tasks_done += 1
        rss = rss_bytes() if rt.max_memory else 0
        recycle = should_recycle(tasks_done=rt.tasks_done, max_tasks=rt.max_tasks, rss_bytes=rss,
                                 max_rss_bytes=rt.max_memory, baseline_rss_bytes=rt.baseline_rss)
        if recycle and not self.recycling:
            self.recycling = recycle  # no job starts from now on; the master gives them back
        else:
            recycle = False
        result.update(t="result", id=frame["id"], token=frame["token"], rss=rss,
                      recycle=recycle, took=round(done - started, 6))
        rt.hold(result)
        if not self._flush_due:  # results ended in one turn of the loop go in one write
            self._flush_due = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        self.rt.flush()

    # --- interrupts -----------------------------------------------------------------------

    def _interrupt(self, frame: dict[str, Any]) -> None:
        slot = self.running.get(frame.get("id"))
        exc = _WHY.get(frame.get("why"))
        if slot is None or exc is None or slot.job.token != frame.get("token"):
            return  # it ended already (its result is on its way), or never started here
        self._interrupt_slot(slot, exc)

    def _interrupt_slot(self, slot: Slot, exc: type[BaseException]) -> None:
        if slot.pending is not None or self.running.get(slot.job.id) is not slot:
            return
        slot.pending = exc
        if slot.handle is not None:
            slot.handle.cancel()
            return
        with slot.lock:
            if slot.thread is not None:
                _raise_in_thread(slot.thread, exc)

    # --- the title ------------------------------------------------------------------------

    def _title(self) -> None:
        busy = len(self.running)
        setproctitle(f"jobrun-child {self.rt.index}: {busy}/{self.slots} slots" if busy
                     else f"jobrun-child {self.rt.index}: idle")
