"""The Python remote worker: a master's ``@app.task`` handlers, run over the worker protocol.

``jobrun worker --url URL --token-file F -A app.module --slots N`` holds no database
connection: it registers with `jobrun web`, claims with a long poll, runs each job (an async
handler as an asyncio task, a sync one in a thread pool of ``slots`` threads; at most
``slots`` at once), renews what it holds every lease TTL / 3 and reports each outcome,
batched, under the job's lease token.

It registers twice ``slots`` credits: it holds up to that many leases, the running jobs and
as many waiting, so that the next claim goes out while the outcomes of the last batch are
being reported instead of after (a claim and a report each cost a round trip; in series they
halved what a worker drains). It claims once at least half its slots' worth of credits is
free, not for every slot freed. A report asks (``claim``) for the credits it frees, so that a
busy worker's next jobs come back with the answer to its last outcomes: one round trip per
batch, not a report and a claim each (the claim loop's long poll is then for a worker that
found the queues empty). ``asking`` counts the credits of the claims in flight, so the two
never ask for more than the credits between them.

Two reports may be in flight (REPORTERS), each with outcomes the other does not carry
(``sending``): while one batch's round trip is under way the other half of the credits runs
and is reported, so the server's time and the worker's overlap instead of taking turns (one
report at a time held a 64-credit worker to one batch per round trip). An outcome waits up to
LINGER for those of the jobs still running unless half the credits' worth is ready: a report
of one outcome costs the server nearly what one of thirty-two does.

The leases it holds are the truth it works from (``held``: job id -> token): a job enters at
its claim and leaves when the server accepted its outcome, or when the server said the lease
was lost (a renewal's ``lost``, or a report's 409): then its outcome is dropped, since
another worker may run the job now. A renewal that says a job's cancel was requested
cancels an async handler (the job ends ``cancelled``); a sync handler runs to its end.
A task's ``time_limit`` is enforced on async handlers (cancelled, outcome ``timeout``, retried
as a failure); a thread cannot be stopped, so a sync handler's is not.

On SIGTERM or SIGINT (recorded by the handler; the loop acts): no more claims; running jobs
get ``grace`` seconds to finish and be reported; async handlers still running then are
cancelled and their jobs reported ``released`` (back to the queue at once, the attempt given
back), as are sync ones, whose late results are then dropped. Then the worker says goodbye
(DELETE) and exits 0. A worker that dies without that stops renewing, and the masters'
reaper requeues its jobs once their leases expire.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import signal
import socket
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from jobrun import validate
from jobrun.app import App, Job, TaskDef
from jobrun.errors import Cancelled, InvalidInput, JobrunError, Permanent, Retry
from jobrun.logs import event
from jobrun.remote.http import ApiError, Channel, Unreachable

log = logging.getLogger("jobrun.remote")
CLAIM_WAIT = 5.0      # seconds a claim waits on the server for a job (and a stop, at most)
BATCH = 200           # outcomes per report at most
LINGER = 0.005        # seconds an outcome may wait for those of the jobs still running
REPORTERS = 2         # reports in flight at once, each on its own connection
MAX_LOG = 60 * 1024   # characters of an attempt's log sent
PAUSE_MAX = 5.0       # longest pause between tries while the server is unreachable
_ATTEMPT_LOG: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "jobrun_remote_log", default=None)


class _AttemptLog(logging.Handler):
    """What a handler logs during its attempt, kept with the attempt (as a master's child
    keeps it): records go to the list of the attempt whose context is current."""

    def emit(self, record: logging.LogRecord) -> None:
        lines = _ATTEMPT_LOG.get()
        if lines is not None and sum(map(len, lines)) < MAX_LOG:
            try:
                lines.append(self.format(record))
            except Exception:  # noqa: BLE001 - a record that does not format is left out
                pass


@dataclass
class Options:
    url: str
    token: str
    slots: int = 4
    name: str = field(default_factory=lambda: socket.gethostname().split(".")[0][:40] or "worker")
    queues: tuple[str, ...] = ()
    grace: float = 30.0


class RemoteWorker:
    def __init__(self, app: App, options: Options) -> None:
        if options.slots < 1:
            raise InvalidInput(f"invalid --slots {options.slots}: 1 or more")
        self.app = app
        self.o = options
        self.queues = list(options.queues) or sorted({t.queue for t in app.tasks.values()})
        if not self.queues:
            raise InvalidInput("the app registers no task and no -Q queue is given")
        for q in self.queues:
            validate.queue_name(q)
        timeout = CLAIM_WAIT + 30.0
        self.claims = Channel(options.url, options.token, timeout)
        self.renewals = Channel(options.url, options.token, timeout)
        self.reports = [Channel(options.url, options.token, timeout) for _ in range(REPORTERS)]
        self.worker_id = ""
        self.ttl = 30.0
        self.held: dict[int, int] = {}             # job id -> lease token
        self.asking = 0                             # credits asked for by claims in flight
        self.running: dict[int, asyncio.Task] = {}  # job id -> the task running it
        self.outbox: list[dict[str, Any]] = []      # outcomes not yet accepted
        self.sending: set[int] = set()              # job ids of the outcomes in flight
        self._outbox_since = 0.0                    # when an outcome last became ready to send
        self.stopping = False
        self.done = 0  # outcomes accepted (read by tests and the final log line)
        self._changed: asyncio.Event | None = None
        self._pool = ThreadPoolExecutor(options.slots, thread_name_prefix="jobrun-handler")
        self.credits = 2 * options.slots  # running plus as many waiting (see the docstring)
        self._slots: asyncio.Semaphore | None = None
        self._singly = 0  # reports to send one outcome at a time (after a refused batch)
        self._halt: asyncio.Event | None = None  # set at the stop: ends a pause between tries
        self.failed = False  # a side task (a reporter, the renewer) died: exit 1

    # --- signals: record only ---------------------------------------------------------------

    def handle_term(self) -> None:
        self.stopping = True
        if self._changed is not None:
            self._changed.set()
        if self._halt is not None:
            self._halt.set()

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        self._changed = asyncio.Event()
        self._halt = asyncio.Event()
        self._slots = asyncio.Semaphore(self.o.slots)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_term)
        capture = _AttemptLog()
        logging.getLogger().addHandler(capture)
        try:
            await self._register()
            renewer = asyncio.create_task(self._renew_loop(), name="jobrun-remote-renew")
            reporters = [asyncio.create_task(self._report_loop(channel),
                                             name=f"jobrun-remote-report-{i}")
                         for i, channel in enumerate(self.reports)]
            for task in (*reporters, renewer):
                task.add_done_callback(self._died)
            await self._claim_loop()
            await self._drain()
            for task in (*reporters, renewer):
                task.cancel()
            await asyncio.gather(*reporters, renewer, return_exceptions=True)
            await self._say_goodbye()
        finally:
            logging.getLogger().removeHandler(capture)
            self._pool.shutdown(wait=False, cancel_futures=True)
            for ch in (self.claims, self.renewals, *self.reports):
                ch.close()
        event(log, logging.INFO, "remote.stopped", worker=self.worker_id, done=self.done)
        if self.failed:
            raise SystemExit(1)

    def _died(self, task: asyncio.Task) -> None:
        """A reporter or the renewer ended by an error: stop (exit 1) rather than hold leases
        that no one reports or renews; the reaper requeues what is left."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        event(log, logging.ERROR, "remote.task_failed", task=task.get_name(),
              error=f"{type(exc).__name__}: {exc}")
        self.failed = True
        self.handle_term()

    async def _call(self, channel: Channel, method: str, path: str, body: Any = None) -> Any:
        return await asyncio.to_thread(channel.call, method, path, body)

    async def _register(self) -> None:
        failures = 0
        while True:
            try:
                reply = await self._call(self.claims, "POST", "/workers", {
                    "name": self.o.name, "queues": self.queues, "credits": self.credits,
                    "tasks": sorted(self.app.tasks)[:1000], "version": _version()})
                break
            except ApiError as exc:
                if exc.status < 500:  # refused (token, scope, a bad name): one line, exit 1
                    raise JobrunError(f"{self.o.url} refused to register this worker:"
                                      f" {exc.status} {exc.code}: {exc.message}") from None
                failures += 1  # the server's trouble (its database down): try again
                event(log, logging.WARNING, "remote.server_error", error=str(exc), retry=failures)
                await self._pause(failures)
            except Unreachable as exc:
                failures += 1
                event(log, logging.WARNING, "remote.unreachable", error=str(exc), retry=failures)
                if self.stopping:
                    raise SystemExit(1) from None
                await self._pause(failures)
        self.worker_id, self.ttl = reply["worker"], float(reply["lease_ttl"])
        self.max_body = int(reply.get("max_body") or 1024 * 1024)
        event(log, logging.INFO, "remote.registered", worker=self.worker_id,
              queues=",".join(self.queues), slots=self.o.slots)

    async def _pause(self, failures: int) -> None:
        """The backoff between tries after ``failures`` failures in a row: only a stop ends it
        early (a job's end must not: a server that is down would be asked as fast as jobs end)."""
        await _until(self._halt, min(PAUSE_MAX, 0.2 * 2 ** min(failures, 8)))

    async def _pause_for(self, seconds: float) -> None:
        """Until something changed (``_changed``) or ``seconds`` passed."""
        await _until(self._changed, seconds)

    async def _claim_loop(self) -> None:
        failures = 0
        while not self.stopping:
            free = self.credits - len(self.held) - self.asking
            if free < max(1, self.o.slots // 2):
                self._changed.clear()
                await self._changed.wait()
                continue
            self.asking += free
            try:
                reply = await self._call(self.claims, "POST", f"/workers/{self.worker_id}/claim",
                                         {"max": free, "wait": CLAIM_WAIT})
                failures = 0
            except Unreachable as exc:
                failures += 1
                event(log, logging.WARNING, "remote.unreachable", error=str(exc), retry=failures)
                await self._pause(failures)
                continue
            except ApiError as exc:
                if exc.status == 404:  # forgotten (silent too long): its leases are gone too
                    event(log, logging.WARNING, "remote.forgotten", worker=self.worker_id)
                    self.held.clear()
                    await self._register()
                elif exc.status >= 500:  # the server's trouble: try again after a pause
                    failures += 1
                    event(log, logging.WARNING, "remote.server_error", error=str(exc),
                          retry=failures)
                    await self._pause(failures)
                else:  # refused (its token no longer covers it): one line, exit 1
                    raise JobrunError(f"{self.o.url} refused a claim: {exc.status} {exc.code}:"
                                      f" {exc.message}") from None
                continue
            finally:
                self.asking -= free
            self._take(reply["jobs"])

    def _take(self, frames: list[dict[str, Any]]) -> None:
        """Start the jobs a claim returned (a claim's, or a report's ``claim``)."""
        for frame in frames:
            self.held[frame["id"]] = frame["token"]
            if self.stopping:  # claimed as the stop came: straight back to the queue
                self._finish(frame, {"outcome": "released"})
            else:
                task = asyncio.create_task(self._run_job(frame))
                self.running[frame["id"]] = task

    async def _run_job(self, frame: dict[str, Any]) -> None:
        job = Job(id=frame["id"], task=frame["task"], queue=frame["queue"],
                  payload=frame["payload"], attempt=frame["attempt"],
                  max_attempts=frame["max_attempts"], priority=frame.get("priority", 0),
                  token=frame["token"], created_at=frame.get("created_at") or 0.0,
                  idempotency_key=frame.get("idempotency_key"))
        lines: list[str] = []
        _ATTEMPT_LOG.set(lines)  # this task's own context (and its thread's, copied below)
        try:
            async with self._slots:
                if self.stopping:  # waited for a slot until the stop: never started
                    raise asyncio.CancelledError
                outcome = await self._outcome(job)
        except asyncio.CancelledError:
            outcome = {"outcome": "released"} if self.stopping else \
                {"outcome": "cancelled", "error": "cancelled while running"}
        finally:
            self.running.pop(job.id, None)
        if lines:
            outcome["log"] = "\n".join(lines)[-MAX_LOG:]
        for key in ("error", "traceback", "log"):  # text the server can store
            if isinstance(outcome.get(key), str):
                outcome[key] = _storable(outcome[key])
        self._finish(frame, outcome)

    async def _outcome(self, job: Job) -> dict[str, Any]:
        task = self.app.tasks.get(job.task)
        if task is None:
            return {"outcome": "failed", "permanent": True,
                    "error": f"unknown task {job.task!r}: this worker's app does not register it"}
        if task.transactional:
            return {"outcome": "failed", "permanent": True,
                    "error": "a transactional task needs a database connection: run it on a master"}
        try:
            if task.is_async:
                value = await asyncio.wait_for(task.fn(job), task.time_limit or None)
            else:
                context = contextvars.copy_context()
                value = await asyncio.get_running_loop().run_in_executor(
                    self._pool, context.run, task.fn, job)
        except TimeoutError as exc:
            if not task.is_async or not task.time_limit:
                return _failure(exc, task, job)  # the handler's own, not its time limit
            outcome = _failure(exc, task, job)
            outcome.update(outcome="timeout", error=f"time limit ({task.time_limit:g} s) exceeded")
            return outcome
        except Retry as exc:
            outcome = {"outcome": "retry", "retry_in": exc.delay, "error": str(exc)[:2000]}
            if task.max_attempts and task.max_attempts < job.max_attempts:
                outcome["max_attempts"] = task.max_attempts
            return outcome
        except Cancelled:
            return {"outcome": "cancelled", "error": "cancelled while running"}
        except Permanent as exc:
            return _failure(exc, task, job, permanent=True)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - any handler failure is a failed attempt
            return _failure(exc, task, job)
        try:
            validate.result(value)
        except InvalidInput as exc:
            return {"outcome": "failed", "error": f"handler returned {exc}"}
        return {"outcome": "succeeded", "result": value}

    def _finish(self, frame: dict[str, Any], outcome: dict[str, Any]) -> None:
        if self.held.get(frame["id"]) != frame["token"]:
            return  # the lease was lost meanwhile: the outcome is not ours to report
        if len(self.outbox) == len(self.sending):  # the first one not on its way
            self._outbox_since = time.monotonic()
        self.outbox.append({"id": frame["id"], "token": frame["token"], **outcome})
        self._changed.set()

    # --- reports and renewals ---------------------------------------------------------------

    async def _report_loop(self, channel: Channel) -> None:
        failures = 0
        while True:
            ready = sum(1 for o in self.outbox if o["id"] not in self.sending)
            if not ready:
                self._changed.clear()
                await self._changed.wait()
                continue
            linger = self._outbox_since + LINGER - time.monotonic()
            if self.running and linger > 0 and ready < self.o.slots and not self.stopping:
                self._changed.clear()  # a job's end sets it: look again
                await self._pause_for(linger)
                continue
            batch = self._batch()
            ids = {o["id"] for o in batch}
            # The credits this report frees, asked for in the same call (none while stopping);
            # those of the reports in flight are theirs to ask for.
            want = 0 if self.stopping else max(0, self.credits - self.asking - (
                len(self.held) - len(self.sending) - len(batch)))
            body: dict[str, Any] = {"outcomes": batch}
            if want:
                body["claim"] = want
            self.asking += want
            self.sending |= ids
            self._outbox_since = time.monotonic()  # for what is left
            try:
                try:
                    reply = await self._call(channel, "POST",
                                             f"/workers/{self.worker_id}/outcomes", body)
                finally:
                    self.sending -= ids
                failures = 0
                self._settled(batch)
                self.done += len(batch)
                if want:
                    self.asking -= want
                    want = 0
                    self._take(reply.get("jobs") or [])
            except Unreachable as exc:
                failures += 1  # kept: the leases are renewed meanwhile; sent again
                event(log, logging.WARNING, "remote.unreachable", error=str(exc), retry=failures)
                await self._pause(failures)
            except ApiError as exc:
                if exc.status == 409:  # some leases were lost: drop those, send the rest
                    lost = {int(k.split(".")[1]) for k in exc.fields if k.startswith("outcomes.")}
                    event(log, logging.WARNING, "remote.lease_lost", jobs=len(lost))
                    self._settled([o for o in batch if o["id"] in lost])
                elif exc.status == 404:
                    self._settled(batch)  # forgotten: its leases went with it
                elif exc.status >= 500:  # the server's trouble: kept, sent again
                    failures += 1
                    event(log, logging.WARNING, "remote.server_error", error=str(exc),
                          retry=failures)
                    await self._pause(failures)
                elif len(batch) > 1:  # one of them is refused: find it, sending one by one
                    self._singly = len(batch)
                else:  # refused as bad: say why, and leave the job to the reaper
                    event(log, logging.ERROR, "remote.report_refused", job=batch[0]["id"],
                          error=exc.message)
                    self._settled(batch)
            finally:
                self.asking -= want

    def _batch(self) -> list[dict[str, Any]]:
        """The next outcomes to send: not in flight, bounded in count and size."""
        waiting = [o for o in self.outbox if o["id"] not in self.sending]
        if self._singly:
            self._singly -= 1
            return waiting[:1]
        batch, size = [], 0
        for item in waiting[:BATCH]:
            weight = 128 + len(str(item.get("result", ""))) + sum(  # about its JSON's size
                len(item.get(k) or "") for k in ("error", "traceback", "log"))
            if batch and size + weight > self.max_body // 2:
                break
            batch.append(item)
            size += weight
        return batch

    def _settled(self, items: list[dict[str, Any]]) -> None:
        ids = {o["id"] for o in items}
        self.outbox = [o for o in self.outbox if o["id"] not in ids]
        for job_id in ids:
            self.held.pop(job_id, None)
        self._changed.set()

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            held = dict(self.held)
            try:
                reply = await self._call(self.renewals, "POST", f"/workers/{self.worker_id}/renew",
                                         {"jobs": [{"id": i, "token": t} for i, t in held.items()]})
            except (Unreachable, ApiError) as exc:
                event(log, logging.WARNING, "remote.renew_failed", error=str(exc))
                continue
            for job_id in reply["lost"]:
                if self.held.get(job_id) == held[job_id]:
                    event(log, logging.WARNING, "remote.lease_lost", job=job_id)
                    self.held.pop(job_id, None)
                    self.outbox = [o for o in self.outbox if o["id"] != job_id]
                    running = self.running.get(job_id)
                    if running is not None:
                        running.cancel()
            for row in reply["renewed"]:
                running = self.running.get(row["id"])
                if row["cancel_requested"] and running is not None:
                    running.cancel()
            self._changed.set()

    # --- stopping ---------------------------------------------------------------------------

    async def _drain(self) -> None:
        """Let running jobs finish within the grace, release the rest; send every outcome."""
        deadline = time.monotonic() + self.o.grace
        event(log, logging.INFO, "remote.stopping", running=len(self.running), grace=self.o.grace)
        while self.running and time.monotonic() < deadline:
            await asyncio.wait(list(self.running.values()), timeout=deadline - time.monotonic())
        for job_id, task in list(self.running.items()):
            task.cancel()  # async: CancelledError -> released; sync: its thread runs on, unheard
        if self.running:
            await asyncio.wait(list(self.running.values()), timeout=1.0)
        deadline = time.monotonic() + max(5.0, self.ttl / 2)
        while self.outbox and time.monotonic() < deadline:  # the reporters send them
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                break

    async def _say_goodbye(self) -> None:
        try:
            await self._call(self.claims, "DELETE", f"/workers/{self.worker_id}")
        except (Unreachable, ApiError):
            pass


async def _until(flag: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(flag.wait(), seconds)
    except TimeoutError:
        pass


def _failure(exc: BaseException, task: TaskDef, job: Job,
             permanent: bool = False) -> dict[str, Any]:
    """A failed attempt: its error line, traceback and (retried) the task's own backoff."""
    try:
        text = str(exc)
    except BaseException:  # noqa: BLE001
        text = "<exception str() failed>"
    line = f"{type(exc).__name__}: {text}".strip()[:2000]
    outcome = {"outcome": "failed", "error": line, "traceback": traceback.format_exc()[-16000:]}
    if permanent:
        outcome["permanent"] = True
    else:
        outcome["retry_in"] = task.retry.delay(job.attempt)
        if task.max_attempts and task.max_attempts < job.max_attempts:
            outcome["max_attempts"] = task.max_attempts  # the task's limit, as a master's
    return outcome


def _storable(text: str) -> str:
    """``text`` without what the database refuses in text: NUL, lone surrogates."""
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _version() -> str:
    from jobrun import __version__

    return f"jobrun-python/{__version__} pid {os.getpid()}"
