"""The prefork master: wires the parts together and orders start-up and teardown.

    notifier ─wake─> claimer ─job frames─> children ─result frames─> completer
                        ^                      ^   \\                    |
                        └──── idle child ──────┘    └─ exits (pidfd) ───┘
    heartbeater thread: extends leases, fences lost or overdue ones
    reaper: requeues expired leases of any master, purges old finished jobs

One event loop (uvloop) in the main thread runs everything except the heartbeater. Signal
handlers (``loop.add_signal_handler``, already a self-pipe) only call ``handle_<signal>``,
each a small method a test can call directly.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
import uuid
from typing import Any, Callable

from setproctitle import setproctitle

from jobrun.store import db
from jobrun import protocol
from jobrun.worker.completer import Completer, Completion
from jobrun.config import Settings
from jobrun.worker.heartbeat import Heartbeater, Lease
from jobrun.worker.lifecycle import backoff_sleep
from jobrun.logs import event
from jobrun.worker.metrics import HttpServer, Metrics, parse_addr
from jobrun.worker.notifier import Notifier
from jobrun.policy import DEFAULT_RETRY, RELEASED, TIMEOUT, WORKER_LOST, RetryPolicy, decide, run_time_average
from jobrun.worker.reaper import Reaper
from jobrun.worker.registry import Registry
from jobrun.sql import for_schema
from jobrun.worker.supervisor import Child, Inflight, Supervisor
from jobrun.worker.signals import SignalsAndShutdown
from jobrun.worker.sdnotify import SystemdHooks  # systemd hook

log = logging.getLogger("jobrun.master")

EXIT_OK = 0
EXIT_FATAL = 1
EXIT_BOOT_ERROR = 3
MAX_EARLY_DEATHS = 5
# While results keep arriving, completion statements start at most this often (see completer).
COMPLETE_LINGER = 0.005


def describe_exit(status: int) -> tuple[str, bool]:
    """A human description of a child's exit status, and whether it was by SIGKILL."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name}", -status == signal.SIGKILL
    return f"exited with code {status}", False


class Master(SignalsAndShutdown):
    def __init__(self, settings: Settings, dsn: str,
                 reload_settings: Callable[[], Settings] | None = None) -> None:
        self.settings = settings
        self.dsn = dsn
        self.reload_settings = reload_settings
        self.q = for_schema(settings.schema)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        # Children report "alive" this often while busy; the heartbeater renews a lease only
        # if its child reported within one heartbeat period (ttl / 3).
        self.alive_interval = max(0.05, min(1.0, settings.lease_ttl / 9))
        self._tick_interval = max(0.01, min(0.25, settings.lease_ttl / 12))
        self._title_dirty = True
        self._policies: dict[str, RetryPolicy] = {}
        self._job_counters: dict[tuple[str, str, str], Any] = {}
        self._durations: dict[tuple[str, str], Any] = {}
        self._waits: dict[str, Any] = {}
        # Recent run time per task (seconds, moving average): only jobs of tasks that run in
        # under prefetch_max_runtime are handed to a child that is still busy.
        self._runtime: dict[str, float] = {}
        self._unclaims: set[asyncio.Task] = set()
        self.target = settings.concurrency
        self.generation = 0
        self.tasks: dict[str, dict[str, Any]] = {}
        self.stopping: str | None = None  # None | "drain" | "fast"
        self.exit_code = EXIT_OK
        self.fenced: set[tuple[int, int]] = set()  # added to by the heartbeater thread
        self._booted = False
        self._early_deaths = 0
        self._free_indexes: list[int] = []
        self._next_index = 1
        self._loop_tick = time.monotonic()
        self._warned_memory = False
        # The last claim came back short: the queues are dry until a notification or the poll
        # floor says otherwise, so a child freed meanwhile does not cost a claim statement.
        self._dry = False
        self._announced = 0  # notifications so far: one that arrives during a claim undries
        self._last_claim = 0.0
        self.metrics = Metrics()
        self.started_at = time.time()
        self.last_db_ok = time.monotonic()
        self.systemd = SystemdHooks(  # systemd hook: sd_notify (a no-op without NOTIFY_SOCKET)
            busy=self.busy, total=lambda: self.target, children=self._current,
            loop_alive=self.loop_alive, heartbeater=lambda: self.heartbeater)

    # --- wiring ---------------------------------------------------------------------------

    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        self.wake_event = asyncio.Event()
        self.done = asyncio.Event()
        self.booted = asyncio.Event()
        self._fast = asyncio.Event()
        for sig, handler in ((signal.SIGTERM, self.handle_term), (signal.SIGINT, self.handle_int),
                             (signal.SIGQUIT, self.handle_quit), (signal.SIGHUP, self.handle_hup),
                             (signal.SIGTTIN, self.handle_ttin), (signal.SIGTTOU, self.handle_ttou)):
            self.loop.add_signal_handler(sig, handler)
        s = self.settings
        self.supervisor = Supervisor(
            self.loop, app=s.app or "", max_tasks=s.max_tasks_per_child,
            max_memory_bytes=s.max_memory_per_child * 1024 * 1024,
            soft_time_limit=s.soft_time_limit, alive_interval=self.alive_interval,
            env=self._child_env(),
            on_frame=self.on_frame, on_exit=self.on_exit)
        m = self.metrics
        self.completer = Completer(self.dsn, self.q, self.owner, self.host, self.pid,
                                   on_refused=self._on_refused,
                                   on_db_error=m.db_errors.labels("complete").inc,
                                   linger=COMPLETE_LINGER)
        self.notifier = Notifier(self.dsn, self.q.channel, set(s.queues), self.wake_for_jobs,
                                 on_db_error=m.db_errors.labels("listen").inc)
        self.reaper = Reaper(self.dsn, self.q, interval=max(0.5, min(5.0, s.lease_ttl / 3)),
                             retention=s.retention, on_reaped=m.expired.inc,
                             on_db_error=m.db_errors.labels("reaper").inc)
        self.heartbeater = Heartbeater(self.dsn, self.q, self.owner, s.lease_ttl,
                                       leases=self.leases, loop_alive=self.loop_alive,
                                       on_fence=self.on_fence_threadsafe,
                                       on_db_error=m.db_errors.labels("heartbeat").inc)
        self.registry = Registry(self.dsn, self.q, row=self.registry_row, on_depth=m.set_depth,
                                 on_error=m.db_errors.labels("registry").inc)
        self.http = None
        addr = parse_addr(s.metrics_addr, s.metrics_allow_remote)
        if addr is not None:
            self.http = HttpServer(addr[0], addr[1], m, health=self.health, ready=self.ready)
            self.http.start()
        self.claim_conn = await db.connect_async(self.dsn, prepare_threshold=0)
        await self._check_clock()
        for _ in range(self.target):
            self._spawn()
        await asyncio.wait([asyncio.ensure_future(self.booted.wait()),
                            asyncio.ensure_future(self.done.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        if not self.done.is_set():
            event(log, logging.INFO, "master.ready", app=s.app, concurrency=self.target,
                  queues=",".join(s.queues), owner=self.owner, pid=self.pid)
            self.completer.start()
            self.notifier.start()
            self.reaper.start()
            self.registry.start()
            self.heartbeater.start()
            self._ticker = self.loop.create_task(self._tick())
            self._claimer = self.loop.create_task(self._claim_loop())
            await self.done.wait()
        await self.claim_conn.close()
        return self.exit_code

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["JOBRUN_DATABASE_URL"] = self.dsn  # for transactional handlers; never in argv
        env["JOBRUN_SCHEMA"] = self.settings.schema
        return env

    async def _check_clock(self) -> None:
        cur = await self.claim_conn.execute(self.q.db_now)
        skew = time.time() - (await cur.fetchone())["clock"].timestamp()
        if abs(skew) > 2.0:
            event(log, logging.WARNING, "clock.skew", seconds=round(skew, 3),
                  note="the database clock decides persisted times; check NTP on this host")

    async def _tick(self) -> None:
        while True:
            self._loop_tick = time.monotonic()
            if self._title_dirty:
                self._render_title()
            await asyncio.sleep(self._tick_interval)  # liveness stamp read by the heartbeater

    def loop_alive(self, within: float) -> bool:
        return time.monotonic() - self._loop_tick < within

    def wake(self) -> None:
        self.wake_event.set()

    def wake_for_jobs(self) -> None:
        """New jobs were announced (NOTIFY, or the LISTEN connection came back)."""
        self._dry = False
        self._announced += 1
        self.wake_event.set()

    def _on_refused(self, items: list[Completion]) -> None:
        self.metrics.refused.inc(len(items))

    # --- observation ----------------------------------------------------------------------

    def registry_row(self) -> dict[str, Any]:
        from jobrun import __version__

        inflight = []
        now = time.time()
        for child in self.supervisor.alive():
            job = child.job
            if job is not None:
                started = now - (time.monotonic() - job.dispatched)
                inflight.append({"id": job.id, "task": job.task, "child": child.index,
                                 "pid": child.pid, "started": round(started, 3)})
        return {"owner": self.owner, "host": self.host, "pid": self.pid, "app": self.settings.app,
                "queues": list(self.settings.queues), "concurrency": self.target,
                "busy": len(inflight), "version": __version__, "inflight": inflight}

    def health(self) -> dict[str, Any]:
        """Event loop alive (it is answering), database reached recently, children up."""
        db_age = time.monotonic() - self.last_db_ok
        live = len(self._current())
        db_ok = db_age < max(10.0, 5 * self.settings.poll_interval)
        ok = db_ok and live > 0 and not self.stopping
        return {"ok": ok, "database_ok": db_ok, "seconds_since_db": round(db_age, 3),
                "children": live, "concurrency": self.target, "stopping": bool(self.stopping)}

    def ready(self) -> bool:
        return self._booted and not self.stopping and bool(self._idle() or self.busy())

    def _states(self) -> None:
        states: dict[str, int] = {}
        for child in self.supervisor.alive():
            state = "busy" if child.job is not None else child.state
            states[state] = states.get(state, 0) + 1
        self.metrics.set_children(states)

    # --- children -------------------------------------------------------------------------

    def _spawn(self) -> Child:
        index = self._free_indexes.pop(0) if self._free_indexes else self._take_index()
        return self.supervisor.spawn(index, self.generation)

    def _take_index(self) -> int:
        index, self._next_index = self._next_index, self._next_index + 1
        return index

    def _current(self) -> list[Child]:
        return [c for c in self.supervisor.alive()
                if c.generation == self.generation and c.state not in ("retiring", "exited")]

    def _idle(self) -> list[Child]:
        return [c for c in self.supervisor.alive()
                if c.state == "idle" and c.generation == self.generation]

    def busy(self) -> int:
        return sum(1 for c in self.supervisor.alive() if c.job is not None)

    def _title(self) -> None:
        """Note that the title and the child gauges changed; the tick renders them (per-event
        rendering cost more than the jobs themselves on a busy master)."""
        self._title_dirty = True

    def _render_title(self) -> None:
        self._title_dirty = False
        self._states()
        s = self.settings
        setproctitle(f"jobrun-master: {s.app} c={self.target} busy={self.busy()}"
                     f" queues={','.join(s.queues)}")

    def leases(self) -> list[Lease]:
        """Jobs this master holds leases for (running, or waiting in a child's pipe), for the
        heartbeater thread: a snapshot, safe to take from it."""
        out = []
        now = time.monotonic()
        quiet = self.settings.lease_ttl / 3
        for child in list(self.supervisor.children.values()):
            job = child.job
            jobs = (job, *child.queued) if job is not None else tuple(child.queued)
            for held in jobs:
                alive = now - max(child.last_alive, held.dispatched or held.claimed) < quiet
                out.append(Lease(held.id, held.token, child, held.claimed, alive))
        return out

    def on_frame(self, child: Child, frame: dict[str, Any]) -> None:
        kind = frame.get("t")
        if kind == "alive":
            return  # the supervisor stamped child.last_alive
        if kind == "ready":
            self._on_ready(child, frame)
        elif kind == "result":
            self._on_result(child, frame)
        else:
            event(log, logging.ERROR, "child.protocol_error", child=child.index, frame=kind)

    def _on_ready(self, child: Child, frame: dict[str, Any]) -> None:
        self.tasks.update(frame.get("tasks", {}))
        self._policies = {name: RetryPolicy(*cfg["retry"]) for name, cfg in self.tasks.items()
                          if "retry" in cfg}
        child.rss = frame.get("rss", 0)
        self._early_deaths = 0
        limit = self.settings.max_memory_per_child * 1024 * 1024
        if limit and child.rss > limit and not self._warned_memory:
            self._warned_memory = True
            event(log, logging.WARNING, "child.over_memory_at_start", rss_mb=child.rss >> 20,
                  limit_mb=self.settings.max_memory_per_child,
                  note="a fresh child is already over --max-memory-per-child; not recycling for memory")
        if child.state == "retiring" or child.generation != self.generation or self.stopping:
            self.supervisor.stop(child)
        else:
            child.state = "idle"
        if not self._booted:
            self._booted = True
            self.booted.set()
        self.systemd.child_ready()  # systemd hook: READY=1 once this generation is up
        self._title()
        self.wake()

    def _on_result(self, child: Child, frame: dict[str, Any]) -> None:
        job = child.job
        if job is None or job.id != frame.get("id") or job.token != frame.get("token"):
            event(log, logging.ERROR, "child.protocol_error", child=child.index,
                  reason="result for a job it does not hold")
            return
        self._finish(child, job)
        child.jobs_done += 1
        child.rss = frame.get("rss", child.rss)
        key = (job.id, job.token)
        if key in self.fenced:
            self.fenced.discard(key)
        elif frame.get("outcome") == "lease_lost":
            # LeaseLost reached the handler although this master never fenced the attempt (a
            # stray signal, or a transactional completion refused by the guard): its lease may
            # still be ours, so say what happened and give the job back.
            self._settle(job, RELEASED, {"error": "interrupted by LeaseLost without a fence",
                                         "log": frame.get("log")}, child.index)
        elif frame.get("recorded"):
            # The child committed the outcome together with the handler's effects.
            self._observe(job, frame["outcome"], ran=True)
        else:
            self._settle(job, frame["outcome"], frame, child.index)
        if frame.get("recycle"):
            child.state = "retiring"  # it exits by itself, without reading what it was sent
            self._give_back(child, "child recycled")
            self.metrics.child_exits.labels(f"recycle_{frame['recycle']}").inc()
            event(log, logging.INFO, "child.recycle", child=child.index, pid=child.pid,
                  reason=frame["recycle"], jobs=child.jobs_done, rss_mb=child.rss >> 20)
        elif child.queued:
            self._start(child, child.queued.popleft())  # already in its pipe: it runs it now
        elif child.state == "retiring" or child.generation != self.generation or self.stopping:
            self.supervisor.stop(child)
        else:
            child.state = "idle"
        self._title()
        self.wake()

    def _finish(self, child: Child, job: Inflight) -> None:
        if job.timer is not None:
            job.timer.cancel()
        child.job = None

    def _start(self, child: Child, job: Inflight) -> None:
        """``job`` is the one ``child`` runs from now on."""
        child.job = job
        child.state = "busy"
        job.dispatched = time.monotonic()
        limit = self._time_limit(job.task)
        if limit:
            job.timer = self.loop.call_later(limit, self._hard_timeout, child, job.id, job.token)

    def _give_back(self, child: Child, why: str) -> None:
        """Jobs waiting in a child that will never run them go back to the queue as if never
        claimed (their attempt is not counted); fenced ones are not ours to give back."""
        rows = []
        while child.queued:
            job = child.queued.popleft()
            if (job.id, job.token) in self.fenced:
                self.fenced.discard((job.id, job.token))
            else:
                rows.append({"id": job.id, "lease_token": job.token})
        if rows:
            event(log, logging.INFO, "jobs.given_back", child=child.index, pid=child.pid,
                  jobs=len(rows), reason=why)
            task = self.loop.create_task(self._unclaim(rows))
            self._unclaims.add(task)
            task.add_done_callback(self._unclaims.discard)

    def _settle(self, job: Inflight, outcome: str, info: dict[str, Any], child_index: int,
                crashed: int = 0) -> None:
        cfg = self.tasks.get(job.task, {})
        policy = self._policies.get(job.task, DEFAULT_RETRY)
        # A task's own max_attempts caps what its jobs were enqueued with.
        max_attempts = min(job.max_attempts, cfg.get("max_attempts") or job.max_attempts)
        fate = decide(outcome, attempts=job.attempts, max_attempts=max_attempts,
                      crashes=job.crashes, max_crashes=cfg.get("max_crashes", 3),
                      retry_delay=info.get("delay"), policy=policy,
                      permanent=bool(info.get("permanent")))
        self._observe(job, outcome, ran=job.dispatched > 0)
        self.systemd.job_done()  # systemd hook: jobs done, for STATUS=
        if fate.status == "dead":  # for the dead-jobs alert (etc/prometheus/jobrun-rules.yml)
            self.metrics.dead.labels(job.queue, job.task).inc()
        self.completer.submit(Completion(
            id=job.id, token=job.token, status=fate.status, outcome=outcome, delay=fate.delay,
            error=info.get("error"), traceback=info.get("traceback"), result=info.get("result"),
            child=child_index, crashed=crashed, log=info.get("log"),
            refund=1 if outcome == RELEASED else 0))

    def _observe(self, job: Inflight, outcome: str, ran: bool) -> None:
        # Labelled children are cached: labels() costs more than the increment itself.
        key = (job.queue, job.task, outcome)
        counter = self._job_counters.get(key)
        if counter is None:
            counter = self._job_counters[key] = self.metrics.jobs.labels(*key)
        counter.inc()
        if ran:
            histogram = self._durations.get(key[:2])
            if histogram is None:
                histogram = self._durations[key[:2]] = self.metrics.duration.labels(*key[:2])
            took = time.monotonic() - job.dispatched
            histogram.observe(took)
            self._runtime[job.task] = run_time_average(self._runtime.get(job.task), took)

    def on_exit(self, child: Child, status: int) -> None:
        what, sigkill = describe_exit(status)
        self._give_back(child, "child exited")
        job = child.job
        planned = child.state == "retiring" or child.kill_reason is not None or self.stopping
        if job is not None:
            self._finish(child, job)
            key = (job.id, job.token)
            if key in self.fenced:
                self.fenced.discard(key)
            elif child.kill_reason == "timeout":
                self.metrics.child_exits.labels("timeout").inc()
                limit = self._time_limit(job.task)
                self._settle(job, TIMEOUT, {"error": f"hard time limit of {limit:g}s exceeded; child {what}"},
                             child.index)
            elif child.kill_reason == "shutdown":
                self._settle(job, RELEASED, {"error": "released at shutdown; child stopped"}, child.index)
            else:
                self.metrics.child_exits.labels("crash").inc()
                hint = " (perhaps out of memory)" if sigkill else ""
                event(log, logging.ERROR, "child.lost", child=child.index, pid=child.pid,
                      job=job.id, task=job.task, status=what + hint)
                self._settle(job, WORKER_LOST, {"error": f"child {what}{hint} while running the job"},
                             child.index, crashed=1)
        elif not planned:
            self.metrics.child_exits.labels("unexpected").inc()
            level = logging.ERROR if status != 0 else logging.WARNING
            event(log, level, "child.exit", child=child.index, pid=child.pid, status=what)
        self._free_indexes.append(child.index)
        self._free_indexes.sort()
        if status == protocol.EXIT_BOOT_ERROR:
            event(log, logging.CRITICAL, "app.load_failed", app=self.settings.app,
                  note="the app could not be imported (see the traceback above); stopping")
            self.exit_code = EXIT_BOOT_ERROR
            self.handle_quit()
            return
        if child.state == "starting" and not planned:
            self._early_deaths += 1
            if self._early_deaths >= MAX_EARLY_DEATHS:
                event(log, logging.CRITICAL, "child.start_failing", deaths=self._early_deaths)
                self.exit_code = EXIT_FATAL
                self.handle_quit()
                return
        self._replenish()
        self._title()
        self.wake()

    def _replenish(self) -> None:
        if self.stopping:
            return
        while len(self._current()) < self.target:
            self._spawn()

    def _time_limit(self, task: str) -> float:
        cfg = self.tasks.get(task, {})
        return cfg.get("time_limit") or self.settings.time_limit

    def on_fence_threadsafe(self, lease: Lease, reason: str) -> None:
        self.fenced.add((lease.id, lease.token))
        self.loop.call_soon_threadsafe(self._on_fenced, lease.id, lease.token, reason)

    def _on_fenced(self, job_id: int, token: int, reason: str) -> None:
        self.metrics.fenced.inc()
        event(log, logging.WARNING, "lease.fenced", job=job_id, token=token, reason=reason)

    # --- claiming -------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        failures = 0
        s = self.settings
        while not self.stopping:
            since = time.monotonic() - self._last_claim
            try:
                await asyncio.wait_for(self.wake_event.wait(),
                                       max(0.0, s.poll_interval - since) if self._dry else s.poll_interval)
            except asyncio.TimeoutError:
                pass
            self.wake_event.clear()
            if self.stopping:
                break
            if self._dry and time.monotonic() - self._last_claim < s.poll_interval:
                continue
            idle = self._idle()
            room, most, dry_soon = self._room(len(idle))
            # Claim for an idle child at once; top up busy ones when one of them runs its last
            # job or three quarters of the room there can be is free, so a deep queue is
            # claimed in batches, not a job at a time, and no child waits for a claim.
            if not idle and (room == 0 or (not dry_soon and room < most * 3 // 4)):
                continue
            limit = len(idle) + room
            for child in idle:
                child.state = "reserved"
            announced = self._announced
            try:
                cur = await self.claim_conn.execute(self.q.claim_jobs, {
                    "queues": list(s.queues), "limit": limit, "owner": self.owner,
                    "ttl": s.lease_ttl})
                rows = await cur.fetchall()
                failures = 0
                self.last_db_ok = self._last_claim = time.monotonic()
                # Short means dry, unless jobs were announced while the claim ran (its snapshot
                # may predate them).
                self._dry = len(rows) < limit and self._announced == announced
            except Exception as exc:  # noqa: BLE001 - database trouble: back off, retry
                for child in idle:
                    if child.state == "reserved":
                        child.state = "idle"
                failures += 1
                self.metrics.db_errors.labels("claim").inc()
                event(log, logging.WARNING, "claim.failed", error=db.first_line(exc), retry=failures)
                if self.claim_conn.closed or self.claim_conn.broken:
                    try:
                        self.claim_conn = await db.connect_async(self.dsn, prepare_threshold=0)
                    except Exception:
                        pass
                await backoff_sleep(failures)
                self.wake()
                continue
            orphans = self._hand_out(idle, rows)
            if orphans:
                await self._unclaim(orphans)
            if rows:
                self.metrics.claim_batch.observe(len(rows))
                for row in rows:
                    wait = self._waits.get(row["queue"])
                    if wait is None:
                        wait = self._waits[row["queue"]] = self.metrics.wait.labels(row["queue"])
                    wait.observe(max(0.0, row["waited"]))
                self._title()
            if len(rows) == limit and not orphans:
                self.wake()  # there may be more (not when rows went back: no child wants them)
        for child in self.supervisor.alive():
            if child.state == "reserved":
                child.state = "idle"

    # Prefetch: a busy child may be handed more jobs, which wait in its pipe and start the
    # moment it finishes the one before: no claim, frame or wake-up between them. Only while
    # every job it holds is of a task whose recent runs were short, and only as long as the
    # work queued in it (by those run times) stays under prefetch_max_runtime, so no job
    # waits in a child for longer than that.

    def _cap(self, child: Child) -> int:
        """How many jobs ``child`` may hold: the prefetch depth, but never more than it will
        run before --max-tasks-per-child retires it."""
        cap = self.settings.prefetch
        if self.settings.max_tasks_per_child:
            cap = min(cap, self.settings.max_tasks_per_child - child.jobs_done)
        return cap

    def _backlog(self, child: Child) -> float | None:
        """Seconds of work ``child`` holds, by recent run times; None if any of it may be long."""
        total = 0.0
        for job in (child.job, *child.queued):
            took = self._runtime.get(job.task) if job is not None else 0.0
            if took is None or took >= self.settings.prefetch_max_runtime:
                return None
            total += took
        return total

    def _headroom(self, child: Child) -> float | None:
        """Seconds of short work ``child`` may still be handed, or None if it may take no more
        (at its cap, which also covers --prefetch 1, or holding a long job, or at the budget)."""
        if child.held() >= self._cap(child):
            return None
        backlog = self._backlog(child)
        if backlog is None or backlog >= self.settings.prefetch_max_runtime:
            return None
        return self.settings.prefetch_max_runtime - backlog

    def _can_top_up(self, child: Child) -> bool:
        return self._headroom(child) is not None

    def _short_only(self, child: Child) -> bool:
        """Below its cap and holding only short jobs (the budget aside)."""
        return child.held() < self._cap(child) and self._backlog(child) is not None

    def _busy(self) -> list[Child]:
        """Children of the current generation that run a job."""
        return [c for c in self.supervisor.alive()
                if c.state == "busy" and c.generation == self.generation]

    def _room(self, idle: int) -> tuple[int, int, bool]:
        """Jobs to claim beyond one per idle child; that figure when every child is empty; and
        whether a child that may be topped up runs its last job (estimates: rows no child can
        take are given back, so they err low)."""
        if self.settings.prefetch <= 1 or not self._runtime:
            return 0, 0, False
        budget = self.settings.prefetch_max_runtime
        typical = max(max(self._runtime.values()), 1e-6)  # the slowest task seen lately
        if typical >= budget:
            return 0, 0, False
        ahead = min(self.settings.prefetch, int(budget / typical)) - 1  # behind the one it runs
        room = idle * ahead
        dry_soon = False
        for child in self._busy():
            headroom = self._headroom(child)
            if headroom is not None:
                room += min(self._cap(child) - child.held(), max(1, int(headroom / typical)))
                dry_soon = dry_soon or not child.queued
        return room, self.target * ahead, dry_soon

    def _hand_out(self, reserved: list[Child], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Give claimed rows to children: one to each reserved (idle) child, then the rest to
        the children holding fewest that may take more (idle, or topped up). One write per
        child. Returns the rows no child took, to be given back."""
        rows = list(rows)
        rows.reverse()
        batches: dict[Child, list[tuple[Inflight, dict[str, Any], bytes]]] = {}
        for child in reserved:
            if child.state != "reserved":
                continue  # exited while the claim ran
            if not rows:
                child.state = "idle"
                continue
            self._assign(child, rows.pop(), batches)
        if rows:
            # Children that went idle while the claim ran take rows too, first.
            self._fill(self._idle() + self._busy(), rows, batches, self._can_top_up)
        if rows:
            # Run times measured while the claim ran may have grown past the room it was
            # sized for: rather than give rows back (a statement, and a claim again), let
            # children holding only short jobs take them, up to --prefetch.
            self._fill(self._busy(), rows, batches, self._short_only)
        orphans = rows[::-1]
        for child, sent in batches.items():
            if child.send(b"".join(frame for _, _, frame in sent)):
                continue
            # Its socket is broken: take back what it never got, and replace it (its exit is
            # reported through its pidfd; a broken child must not keep its slot).
            for job, row, _ in sent:
                if child.job is job:
                    self._finish(child, job)
                else:
                    child.queued.remove(job)
                orphans.append(row)
            child.state = "retiring"
            event(log, logging.ERROR, "child.unwritable", child=child.index, pid=child.pid,
                  jobs=len(sent), note="replacing the child")
            self.supervisor.kill(child, "unwritable")
        return orphans

    def _fill(self, takers: list[Child], rows: list[dict[str, Any]],
              batches: dict[Child, list[tuple[Inflight, dict[str, Any], bytes]]],
              can_take: Callable[[Child], bool]) -> None:
        """Hand rows (popped from the end) to the takers holding fewest, while they can take."""
        takers = [c for c in takers if can_take(c)]
        while rows and takers:
            child = min(takers, key=Child.held)
            self._assign(child, rows.pop(), batches)
            if not can_take(child):
                takers.remove(child)

    def _assign(self, child: Child, row: dict[str, Any],
                batches: dict[Child, list[tuple[Inflight, dict[str, Any], bytes]]]) -> None:
        job = Inflight(id=row["id"], token=row["lease_token"], task=row["task"], queue=row["queue"],
                       attempts=row["attempts"], max_attempts=row["max_attempts"],
                       crashes=row["crashes"], created_at=row["created_at"],
                       claimed=self._last_claim)
        frame = protocol.job_frame({
            "id": job.id, "token": job.token, "owner": self.owner, "task": job.task,
            "queue": job.queue, "attempt": job.attempts, "max_attempts": job.max_attempts,
            "priority": row["priority"], "created_at": job.created_at,
            "key": row["idempotency_key"], "traceparent": row["traceparent"]}, row["payload"])
        if child.job is None:
            self._start(child, job)
        else:
            child.queued.append(job)
        batches.setdefault(child, []).append((job, row, frame))

    async def _unclaim(self, rows: list[dict[str, Any]]) -> None:
        """Give back claimed jobs no child started (one statement)."""
        try:
            await self.claim_conn.execute(self.q.unclaim, {
                "ids": [row["id"] for row in rows], "tokens": [row["lease_token"] for row in rows],
                "owner": self.owner})
        except Exception as exc:  # noqa: BLE001 - the leases then expire and are reaped
            event(log, logging.WARNING, "unclaim.failed", jobs=[row["id"] for row in rows],
                  error=db.first_line(exc))

    def _hard_timeout(self, child: Child, job_id: int, token: int) -> None:
        job = child.job
        if job is not None and job.id == job_id and job.token == token:
            event(log, logging.WARNING, "job.time_limit", job=job_id, task=job.task, child=child.index,
                  limit=self._time_limit(job.task))
            self.supervisor.kill(child, "timeout")
