"""A child process: receives job frames from its master, runs handlers, sends results back.

Never a fork of the master: the master has threads and open libpq sockets, and a plain fork
would copy held locks and share those sockets with the child. A child is either forked by the
fork server (``--spawn fork``, jobrun/child/forkserver.py: a single-threaded process that
imported the app once, ``run_child`` below) or started by fork+exec (``--spawn exec``,
``python -m jobrun.child``, ``main`` below: it imports the app itself). Either way it owns
only the socket passed to it, and a HUP-replaced child runs the new code.

The child dies with its master: PR_SET_PDEATHSIG delivers SIGKILL when the master exits, and
EOF on the socket ends the receive loop. It ignores SIGINT (a terminal's ^C goes to the
master, which decides), and SIGTERM too (service managers signal the whole group; the
master drains and stops its children itself). It always leaves through ``os._exit``.
"""

from __future__ import annotations

import _thread
import argparse
import ctypes
import functools
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from setproctitle import setproctitle

from jobrun import protocol, validate
from jobrun.app import App, Job, TaskDef, load_app
from jobrun.child.capture import LogCapture
from jobrun.child.effects import EffectRunner, from_environment
from jobrun.child.memory import rss_bytes
from jobrun.child.outcomes import INTERRUPTS, interrupted, raised, returned
from jobrun.errors import Cancelled, LeaseLost, SoftTimeLimit
from jobrun import tracing
from jobrun.tracing import attempt_span
from jobrun.policy import FAILED, SUCCEEDED, run_time_average, should_recycle

if TYPE_CHECKING:  # pragma: no cover
    import asyncio  # imported by the first async handler: an app without one never needs it

PR_SET_PDEATHSIG = 1
# Results of jobs that ran while more jobs already waited in the pipe are held back and sent
# together, but never for longer than this, and never across a job that may run longer: the
# master then wakes once for several (a 5 ms job's child holds three or four). Each result
# says how long its job ran ("took"); the master learns of the next job's start, and starts
# its --time-limit clock, up to this late.
HOLD_RESULTS = 0.02


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once per process: the fork server does it before it forks, so
    a forked child calls the function object it inherits (building it costs a child ~70
    copy-on-write page faults)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(master_pid: int) -> None:
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != master_pid:  # the master died before prctl took effect
        os._exit(protocol.EXIT_OK)


class ChildRuntime:
    """Runs jobs one at a time and turns each into a result frame (with ``slots`` > 1, several
    at once: child/slots.py)."""

    def __init__(self, app: App, sock: socket.socket, index: int, *, max_tasks: int = 0,
                 max_memory: int = 0, soft_time_limit: float = 0.0,
                 capture: LogCapture | None = None, slots: int = 1) -> None:
        self.app = app
        self.slots = slots
        self.sock = sock
        self.index = index
        self.max_tasks = max_tasks
        self.max_memory = max_memory
        self.default_soft_limit = soft_time_limit
        self.tasks_done = 0
        self.baseline_rss = rss_bytes()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_task: asyncio.Task | None = None
        self._in_handler = False
        self._pending: type[BaseException] | None = None
        self._title_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.alive_interval = 1.0
        self._current: tuple[Job, float] | None = None
        self.effects: EffectRunner | None = None
        self.capture = capture or LogCapture(capture_print=app.capture_print)
        self._took: dict[str, float] = {}  # recent run time per task, seconds
        self._held: list[dict[str, Any]] = []  # results not sent yet
        self._held_since = 0.0

    # --- signals: raised into the running handler -----------------------------------------

    def install_signals(self) -> None:
        # INT and TERM belong to the master (a terminal's ^C, or a service manager that
        # signals the whole process group): it drains and tells children when to go.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, lambda *_: self._interrupt(LeaseLost))
        signal.signal(signal.SIGUSR2, lambda *_: self._interrupt(Cancelled))
        signal.signal(signal.SIGALRM, lambda *_: self._interrupt(SoftTimeLimit))

    def _interrupt(self, exc: type[BaseException]) -> None:
        if not self._in_handler:
            return  # between jobs: nothing to interrupt
        self._pending = exc
        if self._async_task is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._async_task.cancel)
            return
        raise exc()

    # --- titles ---------------------------------------------------------------------------

    def _title(self) -> None:
        with self._title_lock:
            current = self._current
            if current is None:
                setproctitle(f"jobrun-child {self.index}: idle")
            else:
                job, started = current
                elapsed = time.monotonic() - started
                setproctitle(f"jobrun-child {self.index}: {job.task} job={job.id} {elapsed:.1f}s")

    def _ticker(self) -> None:
        """While a job runs: refresh the title and tell the master this process still runs.

        The master renews a job's lease only while its child keeps saying so, so a child that
        is stopped (SIGSTOP, a debugger) or wedged lets its lease lapse and is fenced.
        """
        while True:
            time.sleep(self.alive_interval)  # a periodic beat, not synchronisation
            if self._current is not None:
                self._title()
                try:
                    self.send({"t": "alive"})
                except OSError:
                    return

    # --- running --------------------------------------------------------------------------

    def send(self, obj: dict[str, Any]) -> None:
        frame = protocol.encode(obj)
        with self._send_lock:  # the ticker thread sends too; frames must not interleave
            self.sock.sendall(frame)

    def hold(self, result: dict[str, Any]) -> None:
        """Keep a result to send with the next ``flush``."""
        self._held.append(result)

    def flush(self) -> None:
        if self._held:
            data, self._held = encode_results(self._held), []
            with self._send_lock:
                self.sock.sendall(data)

    def ready(self) -> None:
        self.send({"t": "ready", "pid": os.getpid(), "rss": self.baseline_rss,
                   "tasks": {name: t.config() for name, t in self.app.tasks.items()}})

    def serve(self) -> None:
        """Run job frames in order. The master may write several at once (prefetch); they are
        read with one receive, and their results go back with one send."""
        self._title()
        # The low-level call: a threading.Thread costs a forked child ~85 more copy-on-write
        # page faults (its bookkeeping touches the module's shared objects), and nothing here
        # joins or enumerates this thread; the child leaves through os._exit.
        _thread.start_new_thread(self._ticker, ())
        if self.slots > 1:
            from jobrun.child.slots import SlotRunner

            SlotRunner(self, self.slots).serve()
            return
        reader = protocol.FrameReader()
        frames: deque[bytes] = deque()
        while True:
            if not frames:
                try:  # more already written? then keep holding results
                    data = self.sock.recv(1 << 16, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    self.flush()
                    self._title()
                    data = self.sock.recv(1 << 16)
                if not data:
                    self.flush()
                    return
                frames.extend(reader.feed(data))
                continue
            frame, undecodable = protocol.decode_job(frames.popleft())
            if frame.get("t") == "stop":
                self.flush()
                return
            if frame.get("t") != "job":
                os._exit(protocol.EXIT_PROTOCOL_ERROR)
            task = frame.get("task")
            took = self._took.get(task)
            if self._held and (took is None or took >= HOLD_RESULTS
                               or time.monotonic() - self._held_since >= HOLD_RESULTS):
                self.flush()
            started = time.monotonic()
            result = self.run(frame) if undecodable is None else self.unrunnable(frame, undecodable)
            done = time.monotonic()
            self._took[task] = run_time_average(took, done - started)
            self.tasks_done += 1
            rss = rss_bytes() if self.max_memory else 0  # /proc costs as much as a noop job
            recycle = should_recycle(tasks_done=self.tasks_done, max_tasks=self.max_tasks,
                                     rss_bytes=rss, max_rss_bytes=self.max_memory,
                                     baseline_rss_bytes=self.baseline_rss)
            result.update(t="result", id=frame["id"], token=frame["token"], rss=rss, recycle=recycle,
                          took=round(done - started, 6))
            if not self._held:
                self._held_since = done
            self._held.append(result)
            if recycle:
                self.flush()
                return

    @staticmethod
    def job_of(frame: dict[str, Any]) -> Job:
        return Job(id=frame["id"], task=frame["task"], queue=frame["queue"],
                   payload=frame["payload"], attempt=frame["attempt"],
                   max_attempts=frame["max_attempts"], priority=frame.get("priority", 0),
                   token=frame["token"], created_at=frame.get("created_at", 0.0),
                   idempotency_key=frame.get("key"), parents=_parents(frame.get("parents")))

    def unrunnable(self, frame: dict[str, Any], undecodable: str | None) -> dict[str, Any]:
        """The outcome of a job that cannot run here: its payload does not decode, or the app
        does not register its task."""
        if undecodable is not None:
            return {"outcome": FAILED, "permanent": True,
                    "error": f"payload cannot be decoded: {undecodable}"}
        known = ", ".join(sorted(self.app.tasks)) or "none"
        return {"outcome": FAILED, "permanent": True,
                "error": f"unknown task {frame.get('task')!r}: the app {self.app_spec} does not"
                         f" register it (registered: {known})"}

    def run(self, frame: dict[str, Any]) -> dict[str, Any]:
        job = self.job_of(frame)
        task = self.app.tasks.get(job.task)
        if task is None:
            return self.unrunnable(frame, None)
        self._current = (job, time.monotonic())
        self._title()
        with self.capture.attempt() as log, attempt_span(job, frame.get("traceparent")) as span:
            try:
                result = self._run_handler(task, job, frame.get("owner", ""), log.text)
            except INTERRUPTS as exc:
                # Arrived after the handler returned, while its result was being built.
                result = interrupted(exc)
            finally:
                self._current = None
            span(result)
        if not result.get("recorded"):
            result["log"] = log.text()
        return result

    def _run_handler(self, task: TaskDef, job: Job, owner: str,
                     log_text: Callable[[], str | None]) -> dict[str, Any]:
        soft = task.soft_time_limit or self.default_soft_limit
        self._pending = None
        try:
            self._in_handler = True
            if soft:
                signal.setitimer(signal.ITIMER_REAL, soft)
            if task.transactional:
                text, skipped = self.effects.run(task, job, owner, log_text)
                return {"outcome": SUCCEEDED, "result": text, "recorded": True,
                        "effects_skipped": skipped}
            if task.is_async:
                value = self._event_loop().run_until_complete(self._run_async(task, job))
            else:
                value = task.fn(job)
        except BaseException as exc:  # noqa: BLE001 - any handler failure is a failed attempt
            return raised(exc)
        finally:
            self._in_handler = False
            if soft:
                signal.setitimer(signal.ITIMER_REAL, 0)
        return returned(value)

    async def _run_async(self, task: TaskDef, job: Job) -> Any:
        import asyncio

        self._async_task = asyncio.current_task()
        try:
            return await task.fn(job)
        except asyncio.CancelledError:
            if self._pending is not None:
                raise self._pending() from None
            raise
        finally:
            self._async_task = None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            import asyncio

            self._loop = asyncio.new_event_loop()
        return self._loop

    app_spec = "?"


# The fields of a plain success: results made only of these go in one "done" frame together.
_PLAIN = frozenset(("t", "id", "token", "outcome", "result", "took", "rss", "recycle"))
_BATCH_BYTES = 1 << 20  # a "done" frame's results: at most this much text


def _plain(result: dict[str, Any]) -> bool:
    """A success with nothing but its result and run time to tell (nothing logged)."""
    if result.get("outcome") != SUCCEEDED or result.get("recycle") or result.get("rss"):
        return False
    return all(v is None for k, v in result.items() if k not in _PLAIN)


def encode_results(results: list[dict[str, Any]]) -> bytes:
    """Results for one write, in the order the jobs ended: runs of plain successes as one
    "done" frame each (columns: one decode in the master for all of them, not one each),
    any other result as its own frame (encode_result)."""
    out: list[bytes] = []
    run: list[dict[str, Any]] = []
    size = 0

    def close_run() -> None:
        nonlocal size
        if len(run) == 1:
            out.append(encode_result(run[0]))
        elif run:
            out.append(protocol.encode({  # (results are valid UTF-8: validate.result)
                "t": "done", "id": [r["id"] for r in run], "token": [r["token"] for r in run],
                "took": [r.get("took") for r in run], "result": [r.get("result") for r in run]}))
        run.clear()
        size = 0

    for result in results:
        if _plain(result):
            text = result.get("result")
            size += len(text) if isinstance(text, str) else 0
            run.append(result)
            if size >= _BATCH_BYTES:
                close_run()
        else:
            close_run()
            out.append(encode_result(result))
    close_run()
    return b"".join(out)


# Text fields of a result that hold what the handler wrote (messages, logs, tracebacks).
_TEXT_FIELDS = ("error", "traceback", "log")


def encode_result(result: dict[str, Any]) -> bytes:
    """The result frame, always sendable: a lone surrogate in a message, traceback or log (a
    file name from os.listdir, say) is written as its escape, and a result too large for one
    frame becomes a failed attempt that says so."""
    try:
        frame = protocol.encode(result)
    except UnicodeEncodeError:
        for name in _TEXT_FIELDS:
            if isinstance(result.get(name), str):
                result[name] = validate.escape_surrogates(result[name])
        frame = protocol.encode(result)
    if len(frame) - protocol.HEADER.size > protocol.MAX_FRAME:
        for name in ("result", "log", "traceback"):
            result.pop(name, None)
        if not result.get("recorded"):  # a recorded success is stored already, result and all
            result.update(outcome=FAILED,
                          error=f"the result frame is {len(frame)} bytes, over the frame limit"
                                f" of {protocol.MAX_FRAME} bytes between child and master")
        frame = protocol.encode(result)
    return frame


def main(argv: list[str] | None = None) -> None:
    """A child started by fork+exec (``--spawn exec``): it imports the app itself."""
    parser = argparse.ArgumentParser(prog="jobrun-child")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--master-pid", type=int, required=True)
    parser.add_argument("--max-tasks", type=int, default=0)
    parser.add_argument("--max-memory", type=int, default=0, help="bytes")
    parser.add_argument("--soft-time-limit", type=float, default=0.0)
    parser.add_argument("--alive-interval", type=float, default=1.0)
    parser.add_argument("--slots", type=int, default=1)
    args = parser.parse_args(argv)

    die_with_parent(args.master_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    setproctitle(f"jobrun-child {args.index}: starting")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=args.fd)
    app = load_app_or_exit(args.app, f"jobrun-child {args.index}")
    run_child(app, args.app, sock, args.index, args.master_pid, max_tasks=args.max_tasks,
              max_memory=args.max_memory, soft_time_limit=args.soft_time_limit,
              alive_interval=args.alive_interval, slots=args.slots)


def load_app_or_exit(spec: str, who: str) -> App:
    """Import the app; if that fails in any way, print why and exit with the boot-error code
    (the master then stops instead of starting children in a loop)."""
    try:
        return load_app(spec)
    except BaseException:  # noqa: BLE001 - report any import failure, then the exit code says it
        print(f"{who}: cannot load app {spec!r}:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(protocol.EXIT_BOOT_ERROR)


def preload(app: App) -> None:
    """Build once, in the fork server, what every child of ``app`` would build (for its
    transactional tasks: psycopg and the named queries of its schema; for its async ones:
    asyncio), so that forked children find it made and shared. An app without them needs
    neither."""
    if any(task.transactional for task in app.tasks.values()):
        _ = from_environment(0, 0).q
    if any(task.is_async for task in app.tasks.values()):
        import asyncio  # noqa: F401


def run_child(app: App, app_spec: str, sock: socket.socket, index: int, master_pid: int, *,
              max_tasks: int, max_memory: int, soft_time_limit: float,
              alive_interval: float, capture: LogCapture | None = None, slots: int = 1) -> None:
    """Serve the master until it says stop, the socket closes or the child recycles; then
    leave through ``os._exit`` (a forked child must never return into the fork server).
    ``capture``: the log capture the fork server built for its children, else a new one."""
    code = protocol.EXIT_OK
    try:
        tracing.configure("jobrun-child")  # OTEL_ENABLED=true: each child exports its spans
        runtime = ChildRuntime(app, sock, index, max_tasks=max_tasks, max_memory=max_memory,
                               soft_time_limit=soft_time_limit, capture=capture, slots=slots)
        runtime.app_spec = app_spec
        runtime.alive_interval = alive_interval
        runtime.effects = from_environment(master_pid, index)
        runtime.install_signals()
        runtime.ready()
        runtime.serve()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the master is gone
    except BaseException:  # noqa: BLE001 - a bug in the runtime: say so, exit non-zero
        traceback.print_exc()
        code = 1
    finally:
        tracing.flush()  # os._exit below skips the provider's own shutdown
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()


def _parents(found: dict[str, Any] | None) -> dict[int, Any] | None:
    """A dependent's parents' results, keyed by id (JSON keys are text)."""
    return None if found is None else {int(k): v for k, v in found.items()}
