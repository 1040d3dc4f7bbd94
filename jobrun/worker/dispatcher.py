"""The dispatcher: the master's side of its children. It keeps the pool at its size, starts a
new generation on reload, runs each handed-out job (time limit, lease snapshot), and turns
what comes back (a result frame, or the child's exit) into an outcome for the completer.

    spawn ──> STARTING ──ready──> IDLE <──> RESERVED/BUSY (worker/handout.py hands jobs out)
    result frame ──> settle (worker/outcomes.py) ──> completer    exit ──> settle, respawn
    jobs waiting in a child that will not run them ──> given back (uncounted)

A child's state moves only through ``Children`` (worker/children.py, the table of moves): the
dispatcher says which move a frame or an exit makes, the owner refuses one it does not allow.

Reload (SIGHUP) starts a new generation beside the one serving; the old one is retired only
once a new child is ready. A new generation whose app fails to import is abandoned (the old
one keeps serving) and the next SIGHUP tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from jobrun import protocol
from jobrun.config import Settings
from jobrun.logs import event
from jobrun.policy import (
    RELEASED, SUCCEEDED, BootFailure, boot_failure, fence_grace, start_failing,
)
from jobrun.worker.child import Child, ChildState, Inflight
from jobrun.worker.children import Children
from jobrun.worker.completer import Completion
from jobrun.worker.exits import EXIT_BOOT_ERROR, describe_exit
from jobrun.worker.forkserver import child_limits
from jobrun.worker.heartbeat import Lease
from jobrun.worker.lifecycle import Service
from jobrun.worker.metrics import Metrics
from jobrun.worker.outcomes import Outcomes
from jobrun.worker.supervisor import Supervisor

log = logging.getLogger("jobrun.master")
S = ChildState


class Dispatcher(Service):
    name = "dispatcher"

    def __init__(self, supervisor: Supervisor, children: Children, settings: Settings,
                 metrics: Metrics, *,
                 submit: Callable[[Completion], None], give_back: Callable[[list[dict]], None],
                 changed: Callable[[], None], fatal: Callable[[int, str], None],
                 reload_failed: Callable[[str], None] = lambda why: None,
                 ran_on: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.supervisor = supervisor
        self.children = children
        children.max_tasks = settings.max_tasks_per_child
        self.settings = settings
        self.metrics = metrics
        self.submit = submit  # an outcome to record
        self.give_back = give_back  # rows claimed but never started, back to the queue
        self.changed = changed  # a child changed state: wake the claimer, re-render the title
        # A busy child finished a job and runs on to one it held (it stays busy): less than
        # a change, most of the time nothing to claim for.
        self.ran_on = ran_on or changed
        self.fatal = fatal  # (exit code, event name): the master must stop
        self.reload_failed = reload_failed  # (why): a new generation did not load
        self.target = settings.concurrency
        self._next_generation = 1
        # What results and exits become, and what is counted (worker/outcomes.py); the
        # names below are its, shared.
        self.results = Outcomes(settings, metrics, submit)
        self.tasks = self.results.tasks
        self.fenced = self.results.fenced  # added to by the heartbeater thread
        self.settle = self.results.settle
        self.booted = asyncio.Event()
        self.outcomes = self.results.counts
        self.runtime = self.results.runtime  # recent run time per task: policy.prefetch
        self.tally = self.results.tally
        self._early_deaths = 0
        self._free_indexes: list[int] = []
        self._next_index = 1
        self._warned_memory = False
        metrics.generation.set(0)

    async def _run(self) -> None:
        self.replenish()
        await asyncio.Event().wait()  # callbacks do the work, on the event loop

    def reconfigure(self, settings: Settings) -> None:
        self.settings = self.results.settings = settings
        self.target = settings.concurrency
        self.children.max_tasks = settings.max_tasks_per_child
        self.supervisor.configure(**child_limits(settings))

    # The generations and the master's stop are kept by the children's owner, whose views
    # filter by them; the dispatcher decides them.

    @property
    def generation(self) -> int:
        """The newest generation (children spawn in it)."""
        return self.children.generation

    @generation.setter
    def generation(self, value: int) -> None:
        self.children.generation = value

    @property
    def serving(self) -> int:
        """The generation whose children take jobs."""
        return self.children.serving

    @serving.setter
    def serving(self, value: int) -> None:
        self.children.serving = value

    @property
    def closing(self) -> bool:
        """The master is stopping: no respawn, no new jobs."""
        return self.children.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self.children.closing = value

    # --- the pool -------------------------------------------------------------------------

    def spawn(self) -> Child:
        if self._free_indexes:
            index = self._free_indexes.pop(0)
        else:
            index, self._next_index = self._next_index, self._next_index + 1
        return self.supervisor.spawn(index, self.generation)

    def park(self, child: Child, job: Inflight, frame: bytes) -> None:
        """Keep ``job`` (claimed for ``child``, which is starting) until it is ready."""
        child.parked = (job, frame)

    def replenish(self) -> None:
        if self.closing:
            return
        children = self.children
        waiting = [c for c in children.alive() if c.successor is None
                   and c.generation == self.generation and children.finishing(c)]
        while len(children.current()) < self.target:
            child = self.spawn()
            if waiting:
                child.predecessor = waiting.pop(0)
                child.predecessor.successor = child

    def _succeeded(self, child: Child) -> None:
        """``child`` ran its last job (or exited): its successor takes over its slot."""
        successor, child.successor = child.successor, None
        if successor is None:
            return
        successor.predecessor = None
        if successor.state is S.STANDBY:
            if successor.parked is not None:
                self._start_parked(successor)
            else:
                self.children.take_over(successor)

    def resize(self, target: int) -> None:
        self.target = target
        current = self.children.current()
        if len(current) > target:
            victim = next((c for c in current if c.state in (S.IDLE, S.STARTING)), current[-1])
            self.supervisor.stop(victim)
        self.replenish()

    def reload(self) -> None:
        """Start a new generation beside the serving one (retired once a new child is ready)."""
        self.generation, self._next_generation = self._next_generation, self._next_generation + 1
        event(log, logging.INFO, "master.reload", generation=self.generation, concurrency=self.target)
        self.replenish()

    def _promote(self) -> None:
        self.serving = self.generation
        self.metrics.generation.set(self.serving)
        for child in self.children.alive():
            if child.generation != self.serving:
                if not child.running and not child.queued:
                    self.supervisor.stop(child)
                else:
                    self.children.retire(child)

    def _abandon(self, child: Child, status: str) -> None:
        """The new generation does not load: stop it, keep the serving one."""
        failed = child.generation
        self.generation = self.serving
        self.metrics.reload_failures.inc()
        event(log, logging.ERROR, "reload.failed", generation=failed, serving=self.serving,
              reason=f"a child of the new generation {status} before it was ready (the app does"
                     " not load; see its traceback above); the old generation keeps serving,"
                     " the next SIGHUP tries again")
        for other in self.children.alive():
            if other.generation == failed:
                self.supervisor.kill(other, "reload_failed")
        self.reload_failed("the new code does not load")

    # --- frames ---------------------------------------------------------------------------

    def on_frame(self, child: Child, frame: dict[str, Any]) -> None:
        kind = frame.get("t")
        if kind == "alive":
            return  # the supervisor stamped child.last_alive
        if kind == "ready":
            self._on_ready(child, frame)
        elif kind == "result":
            self._on_result(child, frame)
        elif kind == "done":
            self._on_done(child, frame)
        else:
            event(log, logging.ERROR, "child.protocol_error", child=child.index, frame=kind)

    def _on_ready(self, child: Child, frame: dict[str, Any]) -> None:
        self.results.learn(frame.get("tasks", {}))
        child.rss = frame.get("rss", 0)
        child.ready = True
        self._early_deaths = 0
        limit = self.settings.max_memory_per_child * 1024 * 1024
        if limit and child.rss > limit and not self._warned_memory:
            self._warned_memory = True
            event(log, logging.WARNING, "child.over_memory_at_start", rss_mb=child.rss >> 20,
                  limit_mb=self.settings.max_memory_per_child,
                  note="a fresh child is already over --max-memory-per-child; not recycling for memory")
        if child.generation == self.generation != self.serving:
            self._promote()
        if (child.state is S.RETIRING or child.generation != self.generation or self.closing
                or child.kill_reason is not None):
            self.give_back_queued(child, "child retiring")
            self.supervisor.stop(child)
        elif child.predecessor is not None:
            self.children.stand_by(child)  # until the child it replaces ran its last job
        elif child.parked is not None:
            self._start_parked(child)
        else:
            self.children.ready(child)
        self.booted.set()
        self.changed()

    def _on_result(self, child: Child, frame: dict[str, Any]) -> None:
        job = self._ended(child, frame.get("id"), frame.get("token"))
        if job is None:
            return
        child.rss = frame.get("rss", child.rss)
        key = (job.id, job.token)
        if key in self.fenced:
            self.fenced.discard(key)
        elif frame.get("outcome") == "lease_lost":
            # LeaseLost reached the handler although this master never fenced the attempt (a
            # stray signal, or a transactional completion refused by the guard): its lease may
            # still be ours, so say what happened and give the job back.
            self.settle(job, RELEASED, {"error": "interrupted by LeaseLost without a fence",
                                        "log": frame.get("log")}, child.index)
        elif frame.get("recorded"):
            # The child committed the outcome together with the handler's effects.
            self.results.observe(job, frame["outcome"], ran=True, took=frame.get("took"))
        else:
            self.settle(job, frame["outcome"], frame, child.index)
        self._then(child, frame.get("recycle"))

    def _on_done(self, child: Child, frame: dict[str, Any]) -> None:
        """A "done" frame: plain successes, in the order they ended; each takes
        ``_on_result``'s path, without a frame of its own to decode."""
        fenced = self.fenced
        for job_id, token, took, result in zip(frame["id"], frame["token"], frame["took"],
                                               frame["result"]):
            job = self._ended(child, job_id, token)
            if job is None:
                continue
            if fenced and (job_id, token) in fenced:
                fenced.discard((job_id, token))
            else:
                self.settle(job, SUCCEEDED, {"took": took, "result": result}, child.index)
            self._then(child, None)

    def _ended(self, child: Child, job_id: Any, token: Any) -> Inflight | None:
        """The job a result names, no longer running in ``child``; None (logged) if the child
        does not run it."""
        job = child.running.get(job_id)
        if job is None or job.token != token:
            event(log, logging.ERROR, "child.protocol_error", child=child.index,
                  reason="result for a job it does not hold")
            return None
        self._finish(child, job)
        child.jobs_done += 1
        return job

    def _then(self, child: Child, recycle: str | None) -> None:
        """What ``child`` does after a job ended: recycle, start what waits in its socket,
        stop, or take jobs again."""
        if recycle:
            self.children.retire(child)  # it exits by itself, without reading what it was sent
            self.give_back_queued(child, "child recycled")
            self.metrics.child_exits.labels(f"recycle_{recycle}").inc()
            event(log, logging.INFO, "child.recycle", child=child.index, pid=child.pid,
                  reason=recycle, jobs=child.jobs_done, rss_mb=child.rss >> 20)
            self._succeeded(child)
            self.replenish()  # its replacement starts while it exits (unless it stands by)
        elif child.queued or child.running:
            self._start_queued(child)  # already in its pipe: it runs them now
            if child.queued and child.slots == 1:  # and holds more behind it (its last one
                self.ran_on()  # is a change: dry soon)
                return
        elif child.state is S.RETIRING or child.generation != self.serving or self.closing:
            self.supervisor.stop(child)
        else:
            self.children.free(child)
        self.changed()

    # --- jobs -----------------------------------------------------------------------------

    def start_job(self, child: Child, job: Inflight) -> None:
        """``job`` is the one ``child`` runs from now on."""
        self.children.start(child, job)
        job.dispatched = time.monotonic()
        limit = self.time_limit(job.task)
        if limit:
            job.timer = asyncio.get_running_loop().call_later(
                limit, self._hard_timeout, child, job.id, job.token)
        if child.successor is None and self.children.finishing(child):
            self.replenish()  # its successor starts now, and stands by

    def _start_queued(self, child: Child) -> None:
        """Start the jobs waiting in ``child``'s socket that it starts now (Child.can_start:
        one without slots; with slots, while it has room)."""
        queued = child.queued
        while queued and child.can_start(queued[0]):
            self.start_job(child, queued.popleft())

    def _start_parked(self, child: Child) -> None:
        """Hand a child that just became ready the job claimed for it while it started."""
        job, frame = child.parked
        child.parked = None
        self.start_job(child, job)
        if child.send(frame):
            return
        self._finish(child, job)  # its socket is broken: it never got the job
        child.parked = (job, frame)
        self.give_back_queued(child, "child unwritable")
        self.replace_unwritable(child, 1)

    def replace_unwritable(self, child: Child, jobs: int) -> None:
        """``child``'s socket is broken: it cannot take jobs, so it must not keep its slot.
        Killed; its exit is reported through its pidfd, and a successor spawned then."""
        self.children.retire(child)
        event(log, logging.ERROR, "child.unwritable", child=child.index, pid=child.pid,
              jobs=jobs, note="replacing the child")
        self.supervisor.kill(child, "unwritable")

    def _finish(self, child: Child, job: Inflight) -> None:
        if job.timer is not None:
            job.timer.cancel()
        self.children.end(child, job)

    def take_back(self, child: Child, job: Inflight) -> None:
        """Undo a hand-out the child never received (its socket broke)."""
        if child.running.get(job.id) is job:
            self._finish(child, job)
        else:
            child.queued.remove(job)

    def time_limit(self, task: str) -> float:
        return self.results.time_limit(task)

    def _hard_timeout(self, child: Child, job_id: int, token: int) -> None:
        job = child.running.get(job_id)
        if job is None or job.token != token:
            return
        event(log, logging.WARNING, "job.time_limit", job=job_id, task=job.task,
              child=child.index, limit=self.time_limit(job.task))
        if child.slots > 1 and len(child.running) > 1:
            # Its neighbours run on: ask that job to stop, and kill the child only if it
            # will not (the others are then released).
            child.send(protocol.interrupt_frame(job.id, job.token, "timeout"))
            job.timer = asyncio.get_running_loop().call_later(
                fence_grace(self.settings.lease_ttl), self._kill_for, child, job, "timeout")
            return
        self._kill_for(child, job, "timeout")

    def _kill_for(self, child: Child, job: Inflight, reason: str) -> None:
        """Kill ``child`` because of ``job`` (still running): that job's outcome is the
        reason's; the others it runs are released."""
        if child.running.get(job.id) is job:
            child.kill_job = job.id
            self.supervisor.kill(child, reason)

    def jobs_done(self) -> int:
        return self.results.jobs_done()

    def give_back_queued(self, child: Child, why: str) -> None:
        """Jobs waiting in a child that will never run them go back to the queue as if never
        claimed (their attempt is not counted); fenced ones are not ours to give back."""
        rows = []
        if child.parked is not None:
            child.queued.appendleft(child.parked[0])
            child.parked = None
        while child.queued:
            job = child.queued.popleft()
            if (job.id, job.token) in self.fenced:
                self.fenced.discard((job.id, job.token))
            else:
                rows.append({"id": job.id, "lease_token": job.token, "queue": job.queue})
        if rows:
            event(log, logging.INFO, "jobs.given_back", child=child.index, pid=child.pid,
                  jobs=len(rows), reason=why)
            self.outcomes["given_back"] += len(rows)
            self.give_back(rows)

    # --- exits ----------------------------------------------------------------------------

    def on_exit(self, child: Child, status: int) -> None:
        what, sigkill = describe_exit(status)
        self.give_back_queued(child, "child exited")
        self._succeeded(child)
        if child.predecessor is not None:  # a successor that died: its predecessor gets another
            child.predecessor.successor = None
            child.predecessor = None
        planned = (child.state is S.RETIRING or child.kill_reason is not None or self.closing
                   or child.generation > self.generation)
        if child.running:
            lost = list(child.running.values())
            for job in lost:
                self._finish(child, job)
            self.results.lost(child, lost, what, sigkill)
        elif not planned:
            self.metrics.child_exits.labels("unexpected").inc()
            level = logging.ERROR if status != 0 else logging.WARNING
            event(log, level, "child.exit", child=child.index, pid=child.pid, status=what)
        self._free_indexes.append(child.index)
        self._free_indexes.sort()
        if status == protocol.EXIT_BOOT_ERROR and child.generation <= self.generation:
            verdict = boot_failure(was_ready=child.ready, booted=self.booted.is_set(),
                                   newer_than_serving=child.generation > self.serving)
            if verdict is BootFailure.STOP:
                event(log, logging.CRITICAL, "app.load_failed", app=self.settings.app,
                      note="the app could not be imported (see the traceback above); stopping")
                self.fatal(EXIT_BOOT_ERROR, "app.load_failed")
                return
            if verdict is BootFailure.RELOAD_FAILED:
                self._abandon(child, what)
                self.changed()
                return
        if child.state is S.STARTING and not planned:
            self._early_deaths += 1
            if start_failing(self._early_deaths):
                event(log, logging.CRITICAL, "child.start_failing", deaths=self._early_deaths)
                self.fatal(1, "child.start_failing")
                return
        self.replenish()
        self.changed()

    # --- views ----------------------------------------------------------------------------

    def leases(self) -> list[Lease]:
        """Jobs this master holds leases for (running, or waiting in a child's pipe), for the
        heartbeater thread: a snapshot, safe to take from it."""
        out = []
        now = time.monotonic()
        quiet = self.settings.lease_ttl / 3
        for child in self.children.alive():
            for held in child.holding():
                alive = now - max(child.last_alive, held.dispatched or held.claimed) < quiet
                out.append(Lease(held.id, held.token, child, held.claimed, alive,
                                 framed=child.slots > 1))
        return out

    def on_fence_threadsafe(self, lease: Lease, reason: str) -> None:
        self.fenced.add((lease.id, lease.token))
        self.supervisor.loop.call_soon_threadsafe(self._on_fenced, lease.id, lease.token, reason)

    def interrupt_threadsafe(self, lease: Lease, why: str) -> None:
        """Interrupt one job of a child with slots (``why``: lease_lost or cancel) by a frame,
        written from the event loop (the heartbeater's thread calls this)."""
        frame = protocol.interrupt_frame(lease.id, lease.token, why)
        self.supervisor.loop.call_soon_threadsafe(lease.child.send, frame)

    def _on_fenced(self, job_id: int, token: int, reason: str) -> None:
        self.metrics.fenced.inc()
        event(log, logging.WARNING, "lease.fenced", job=job_id, token=token, reason=reason)

    def inflight(self) -> list[dict[str, Any]]:
        now = time.time()
        out = []
        for child in self.children.alive():
            for job in child.running.values():
                started = now - (time.monotonic() - job.dispatched)
                out.append({"id": job.id, "task": job.task, "child": child.index,
                            "pid": child.pid, "started": round(started, 3)})
        return out

    # The master's views of its children, which live on their owner (worker/children.py).

    def current(self) -> list[Child]:
        return self.children.current()

    def running(self) -> int:
        return self.children.running()

    def takes_jobs(self) -> bool:
        return self.children.takes_jobs()

    def count_states(self) -> dict[str, int]:
        return self.children.count_states()
