"""The prefork master: builds its parts and lists them once (``_wire``), and holds the
``handle_<signal>`` methods. Business rules live in jobrun.policy; the parts in their modules:

    notifier ─wake─> claimer ─job frames─> children ─result frames─> dispatcher ─> completer
                        ^                      ^   \\                    |
                        └──── idle child ──────┘    └─ exits (pidfd) ───┘

One event loop (uvloop) in the main thread runs every part but the heartbeater thread (see
docs/architecture.md). Signal handlers (``loop.add_signal_handler``, already a self-pipe) only
call ``handle_<signal>``, small methods a test can call directly. The list of parts
(lifecycle.Parts) names for each the phase that starts it and the teardown stage that stops
it; a SIGHUP reaches every one, and one that crashes stops the master (exit 1). The teardown
(worker/teardown.py) sees the master only through the ``Crew`` it is given.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import uuid
from typing import Any, Callable

from setproctitle import setproctitle

from jobrun import config, protocol
from jobrun.child.clone import unsupported as forkserver_unsupported
from jobrun.config import Settings
from jobrun.errors import JobrunError
from jobrun.logs import event
from jobrun.policy import database_reached, reap_interval
from jobrun.sql import for_schema
from jobrun.store.connector import Connector
from jobrun.worker import teardown
from jobrun.worker.teardown import CLAIMS, LAST, LEASES, SERVICES
from jobrun.worker.aging import AgingSweeper
from jobrun.worker.children import Children
from jobrun.worker.claimer import Claimer
from jobrun.worker.completer import Completer
from jobrun.worker.dispatcher import Dispatcher
from jobrun.worker.exits import EXIT_BOOT_ERROR, EXIT_FATAL, EXIT_OK, describe_exit
from jobrun.worker.forkserver import ForkServer, ForkServers, child_env, child_limits
from jobrun.worker.handout import HandOut
from jobrun.worker.heartbeat import Heartbeater
from jobrun.worker.leader import Elector
from jobrun.worker.lifecycle import Entry, Parts, Service
from jobrun.worker.metrics import HttpServer, Metrics, parse_addr
from jobrun.worker.notifier import Notifier
from jobrun.worker.reaper import Reaper
from jobrun.worker.scheduler import Scheduler
from jobrun.worker.sdnotify import SystemdHooks
from jobrun.worker.registry import Registry
from jobrun.worker.supervisor import Supervisor
from jobrun.worker.ticker import Ticker

log = logging.getLogger("jobrun.master")


class Master:
    def __init__(self, settings: Settings, dsn: str,
                 reload_settings: Callable[[], Settings] | None = None,
                 launched: ForkServer | None = None) -> None:
        self.settings = settings
        self.launched = launched  # the first fork server, launched by the command line
        self.dsn = dsn
        self.reload_settings = reload_settings
        self.q = for_schema(settings.schema)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.owner = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.stopping: str | None = None  # None | "drain" | "fast"
        self.exit_code = EXIT_OK
        self.metrics = Metrics()
        self.db = Connector(dsn)  # every part's connections, and the one database health
        self.systemd = SystemdHooks(  # sd_notify (a no-op without NOTIFY_SOCKET)
            busy=lambda: self.dispatcher.running(), total=lambda: self.dispatcher.target,
            done=lambda: self.dispatcher.jobs_done(), children=lambda: self.dispatcher.current(),
            loop_alive=lambda within: self.ticker.loop_alive(within),
            heartbeater=lambda: self.heartbeater)

    # --- wiring ---------------------------------------------------------------------------

    async def run(self) -> int:
        self.loop = asyncio.get_running_loop()
        self.done = asyncio.Event()
        self.fast = asyncio.Event()
        self._wire()
        # First, before any thread or connection of the master exists: the fork server imports
        # the app while the claimer connects. Usually the command line launched it already,
        # before the master's own imports and migrations: here it is only watched.
        self.parts.start("first")
        try:
            await self.claimer.connect()
        except JobrunError as exc:
            event(log, logging.CRITICAL, "master.start_failed", error=str(exc))
            await self.parts.stop(LAST, teardown.CLOSE)  # the fork server
            return EXIT_FATAL
        if self.forkservers is not None:
            status = await self.forkservers.booted()
            if status is not None:
                await self.claimer.close()
                return self._forkserver_boot_failed(status)
        for name in protocol.MASTER_SIGNALS:
            self.loop.add_signal_handler(getattr(signal, "SIG" + name),
                                         getattr(self, "handle_" + name.lower()))
        self.parts.start("boot")
        await asyncio.wait([asyncio.ensure_future(self.dispatcher.booted.wait()),
                            asyncio.ensure_future(self.done.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        if not self.stopping:
            s = self.settings
            event(log, logging.INFO, "master.ready", app=s.app, concurrency=self.dispatcher.target,
                  queues=",".join(s.queues), owner=self.owner, pid=self.pid)
            self.parts.start("serve")
        await self.done.wait()
        return self.exit_code

    def _wire(self) -> None:
        s, m = self.settings, self.metrics
        env = child_env(self.dsn, s.schema)
        self.forkservers = self._forkservers(env)
        self.children = Children()
        self.supervisor = Supervisor(
            self.loop, app=s.app or "", **child_limits(s),
            env=env, forkservers=self.forkservers,  # it reports to the dispatcher, made next
            on_frame=lambda child, frame: self.dispatcher.on_frame(child, frame),
            on_exit=lambda child, status: self.dispatcher.on_exit(child, status),
            children=self.children)
        self.completer = Completer(self.db, self.q, self.owner, self.host, self.pid,
                                   on_refused=lambda items: m.refused.inc(len(items)),
                                   on_db_error=m.db_errors.labels("complete").inc,
                                   linger=lambda: self.claimer.complete_linger())
        self.ticker = Ticker(s.lease_ttl, self._render_title)
        self.dispatcher = Dispatcher(self.supervisor, self.children, s, m, submit=self.completer.submit,
                                     give_back=lambda rows: self.claimer.give_back(rows), changed=self._changed,
                                     fatal=self._fatal, reload_failed=self.systemd.reload_failed,
                                     ran_on=self._ran_on)
        self.claimer = Claimer(self.db, self.q, self.owner, s,
                               HandOut(self.children, self.dispatcher, s, self.owner), m,
                               on_db_ok=self.note_db_ok, unwritten=self.completer.unwritten,
                               holding=self.children.holding, tally=self.dispatcher.tally)
        self.notifier = Notifier(self.db, self.q.listen_ready, set(s.queues), self.claimer.wake_for_jobs,
                                 on_db_error=m.db_errors.labels("listen").inc)
        self.elector = Elector(self.db, self.q, self.owner, ttl=s.schedule_lease_ttl, metrics=m,
                               on_db_error=m.db_errors.labels("scheduler").inc)
        self.reaper = Reaper(self.db, self.q, interval=reap_interval(s.lease_ttl),
                             retention=s.retention, on_reaped=m.expired.inc,
                             on_db_error=m.db_errors.labels("reaper").inc, leader=self.elector,
                             tasks=lambda: self.dispatcher.tasks)
        self.aging = AgingSweeper(self.db, self.q, None,  # the leader sweeps every queue
                                  on_aged=lambda queue, n: m.aged.labels(queue).inc(n),
                                  on_db_error=m.db_errors.labels("aging").inc, leader=self.elector)
        self.heartbeater = Heartbeater(self.db, self.q, self.owner, s.lease_ttl,
                                       leases=self.dispatcher.leases,
                                       loop_alive=self.ticker.loop_alive,
                                       on_fence=self.dispatcher.on_fence_threadsafe,
                                       interrupt=self.dispatcher.interrupt_threadsafe,
                                       on_db_error=m.db_errors.labels("heartbeat").inc)
        self.scheduler = Scheduler(
            self.db, self.q, self.elector,
            payload_limit=s.max_payload_bytes, metrics=m,
            declared=lambda: [p for t in self.dispatcher.tasks.values() for p in t.get("periodic", ())],
            on_db_error=m.db_errors.labels("scheduler").inc, notifier=self.notifier)
        self.registry = Registry(self.db, self.q, row=self.registry_row, on_depth=m.set_depth,
                                 on_error=m.db_errors.labels("registry").inc, leader=self.elector)
        addr = parse_addr(s.metrics_addr, s.metrics_allow_remote)
        self.http = None if addr is None else HttpServer(addr[0], addr[1], m, health=self.health,
                                                         ready=self.ready)
        self.db.watch_server(self.q.server_identity, self.change_owner)
        # Every part in start order, the phase that starts it and the teardown stage that stops
        # it: start-up, reload and teardown walk this list and no other.
        self.parts = Parts([Entry(part, starts, stops) for part, starts, stops in (
            (self.forkservers, "first", LAST),  # before any thread or connection of the master
            (self.http, "boot", SERVICES), (self.dispatcher, "boot", SERVICES),
            (self.completer, "serve", SERVICES), (self.notifier, "serve", CLAIMS),
            (self.elector, "serve", CLAIMS),  # stopped after the scheduler: gives the lease up
            (self.reaper, "serve", SERVICES), (self.aging, "serve", SERVICES),
            (self.scheduler, "serve", CLAIMS), (self.registry, "serve", SERVICES),
            (self.ticker, "serve", SERVICES), (self.heartbeater, "serve", LEASES),
            (self.claimer, "serve", CLAIMS), (self.systemd.watchdog, "serve", LAST),
        ) if part is not None], on_crash=self._service_crashed)
        self.crew = teardown.Crew(
            parts=self.parts, pool=self.dispatcher, children=self.supervisor, claimer=self.claimer,
            completer=self.completer, changed=self.claimer.wake_event, fast=self.fast,
            grace=lambda: self.settings.grace, exit_code=lambda: self.exit_code)

    def _forkservers(self, env: dict[str, str]) -> ForkServers | None:
        """None with --spawn exec, or where forking is unsupported: every child is exec'd."""
        launched, self.launched = self.launched, None
        why = "exec" if self.settings.spawn != "fork" else forkserver_unsupported()
        if why is None:
            return ForkServers(self.loop, self.settings.app or "", env,
                               on_died=self.metrics.forkserver_deaths.inc, launched=launched)
        if why != "exec":
            event(log, logging.WARNING, "forkserver.unsupported", reason=why,
                  note="starting every child by exec")
        if launched is not None:
            launched.abandon()
        return None

    def _forkserver_boot_failed(self, status: int) -> int:
        what, _ = describe_exit(status)
        if status == EXIT_BOOT_ERROR:
            event(log, logging.CRITICAL, "app.load_failed", app=self.settings.app,
                  note="the app could not be imported (see the traceback above); stopping")
            return EXIT_BOOT_ERROR
        event(log, logging.CRITICAL, "forkserver.start_failed", status=what,
              note="the fork server died before it was ready; try --spawn exec")
        return EXIT_FATAL

    def _changed(self) -> None:
        self.ticker.mark_changed()
        self.systemd.child_ready()  # READY=1 once every child of the generation is up
        self.claimer.wake()

    def _ran_on(self) -> None:
        self.ticker.mark_changed()
        self.claimer.ran_on()

    def _fatal(self, code: int, why: str) -> None:
        self.exit_code = code
        self.handle_quit()

    def _service_crashed(self, service: Service, exc: BaseException) -> None:
        event(log, logging.CRITICAL, "master.service_failed", service=service.name,
              note="a part of the master crashed; stopping so that systemd restarts it")
        self._fatal(EXIT_FATAL, "service crashed")

    def change_owner(self, previous_server: str, server: str) -> None:
        """The one place the master's owner id changes: when its connections reach another
        primary than before (a failover: store.connector calls this, from whichever part or
        thread connected first, before that connection is used). The new primary may have lost
        the old one's last commits (asynchronous replication) and with them the lease tokens
        this master last drew, so the same (owner, token) could be handed out twice. A new
        owner id (same host and pid) rules that out: every attempt claimed before the switch
        is refused by the guards on (lease_owner, lease_token) at its next renewal or
        completion, fenced, and run again once its lease expires (at least once)."""
        old, self.owner = self.owner, f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        for part in (self.claimer, self.claimer.handout, self.completer, self.heartbeater,
                     self.elector):
            part.owner = self.owner
        self.registry.retired.add(old)  # its row goes at the next refresh (the new one comes)
        event(log, logging.WARNING, "master.owner_changed", previous=old, owner=self.owner,
              server=server, previous_server=previous_server)

    def note_db_ok(self) -> None:
        """A database round trip just succeeded (from any part, any thread)."""
        self.db.succeeded()

    # --- observation ----------------------------------------------------------------------

    def registry_row(self) -> dict[str, Any]:
        from jobrun import __version__

        inflight = self.dispatcher.inflight()
        return {"owner": self.owner, "host": self.host, "pid": self.pid, "app": self.settings.app,
                "queues": list(self.settings.queues), "concurrency": self.dispatcher.target,
                "slots": self.settings.slots,
                "busy": len(inflight), "version": __version__, "inflight": inflight,
                "tasks": sorted(self.dispatcher.tasks), "held": json.dumps(self.claimer.held)}

    def health(self) -> dict[str, Any]:
        """Event loop alive (it is answering), database reached recently (store.connector's
        health: the last good round trip of any part, the failures since, the last error),
        children up."""
        database = self.db.health.report()
        live = len(self.dispatcher.current())
        db_ok = database_reached(database.seconds_since_ok, self.settings.poll_interval)
        ok = db_ok and live > 0 and not self.stopping
        return {"ok": ok, "database_ok": db_ok, **database.as_dict(),
                "children": live, "concurrency": self.dispatcher.target,
                "stopping": bool(self.stopping)}

    def ready(self) -> bool:
        d = self.dispatcher
        return d.booted.is_set() and not self.stopping and d.takes_jobs()

    def _render_title(self) -> None:
        self.metrics.set_children(self.dispatcher.count_states(), self.children.slots())
        s = self.settings
        setproctitle(f"jobrun-master: {s.app} c={self.dispatcher.target}"
                     f" busy={self.dispatcher.running()} queues={','.join(s.queues)}")

    # --- signals (each callable from a test without sending a signal) ---------------------

    def handle_term(self) -> None:
        """Drain: stop claiming; give in-flight jobs --grace seconds; release the rest."""
        if self.stopping:
            self.handle_quit()
            return
        event(log, logging.INFO, "master.draining", grace=self.settings.grace,
              busy=self.dispatcher.running())
        self.systemd.stopping()  # STOPPING=1
        self.stopping = "drain"
        self.loop.create_task(self._teardown())

    handle_int = handle_term

    def handle_quit(self) -> None:
        """Fast stop: kill children now and release their jobs back to the queue."""
        self.fast.set()
        if self.stopping:
            self.stopping = "fast"
            return
        event(log, logging.INFO, "master.stopping_fast", busy=self.dispatcher.running())
        self.systemd.stopping()  # STOPPING=1
        self.stopping = "fast"
        self.loop.create_task(self._teardown())

    async def _teardown(self) -> None:
        try:
            await teardown.run(self.crew)
        finally:
            self.done.set()

    def handle_hup(self) -> None:
        """Re-read the settings (config file included), apply them to every part, and start a
        new generation of children; the old one retires once a new child is ready."""
        if self.stopping:
            return
        self.systemd.reloading()  # RELOADING=1; READY=1 when the new children are up
        if self.reload_settings is not None:
            try:
                new = self.reload_settings()  # each value checked by its line of config.Settings
            except Exception as exc:  # noqa: BLE001 - keep running on a bad config
                event(log, logging.ERROR, "reload.failed", error=str(exc),
                      note="the configuration was refused; the old settings stay")
                self.metrics.reload_failures.inc()
                self.systemd.reload_failed("bad configuration")
                return
            self.reconfigure(new)
        if self.forkservers is None:
            self.dispatcher.reload()
        else:  # the new generation starts once a fork server has imported the new code
            self.forkservers.reload(self._forkserver_reloaded)

    def _forkserver_reloaded(self, ok: bool) -> None:
        if self.stopping:
            return
        if ok:
            self.dispatcher.reload()
            return
        self.metrics.reload_failures.inc()
        event(log, logging.ERROR, "reload.failed", serving=self.dispatcher.serving,
              reason="the new fork server could not import the app (see its traceback above);"
                     " the old one keeps serving, the next SIGHUP tries again")
        self.systemd.reload_failed("the new code does not load")

    def reconfigure(self, new: Settings) -> None:
        """The one path new settings take: every part applies what concerns it. The settings
        read only at start (config.Settings: the app, schema, database, spawn mode, metrics
        address, logging) keep the values the master started with."""
        self.settings, kept = config.reloaded(self.settings, new)
        if kept:
            event(log, logging.WARNING, "reload.restart_needed", settings=",".join(kept),
                  note="read at start only: these keep their old values until a restart")
        self.parts.reconfigure(self.settings)
        self.ticker.mark_changed()

    def handle_ttin(self) -> None:
        """One child more."""
        self._resize(+1)

    def handle_ttou(self) -> None:
        """One child fewer (an idle one if there is one), never below one."""
        self._resize(-1)

    def _resize(self, step: int) -> None:
        target = self.dispatcher.target + step
        if self.stopping or target < 1:
            return
        event(log, logging.INFO, "master.resize", concurrency=target)
        self.dispatcher.resize(target)
        self.ticker.mark_changed()
