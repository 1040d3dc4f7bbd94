"""systemd's notify protocol for the master: READY, STATUS, WATCHDOG, RELOADING, STOPPING
(sent through ``jobrun.sdnotify.Notify``, a no-op without ``$NOTIFY_SOCKET``).

``SystemdHooks`` is what the master calls, at a few marked lines:

    boot       -> child_ready() ...      READY=1 once every child of the first generation is up
                                         (the schema was checked by the cli before the master
                                         was built)
    running    -> the watchdog, a part of the master (``Watchdog``, a lifecycle.Service) from
                  the first READY=1 on: WATCHDOG=1 every WATCHDOG_USEC / 2 while the loop
                  ticks and the heartbeater thread is alive; STATUS= with
                  busy/total children and jobs done, when it changed
    SIGHUP     -> reloading()            RELOADING=1 with MONOTONIC_USEC; READY=1 again when
                  the new generation of children is up (or at once if the reload failed)
    SIGTERM    -> stopping()             STOPPING=1

The watchdog ping is sent from the event loop on purpose: a stalled loop sends none, and
systemd (WatchdogSec=) kills and restarts the master. A frozen (SIGSTOPped) master sends none
either. The heartbeater is checked too, since a master whose leases lapse is not healthy even
if its loop turns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Callable

from jobrun.logs import event
from jobrun.sdnotify import Notify, monotonic_usec
from jobrun.worker.child import ChildState
from jobrun.worker.lifecycle import Service

log = logging.getLogger("jobrun.systemd")

class SystemdHooks:
    """The master's side of the protocol. It sees the master only through what it is given:
    ``busy()`` and ``total()`` children, ``done()`` jobs, ``children()`` of the current
    generation (each with a ``state``), ``loop_alive(within)`` and ``heartbeater()`` (an object
    with a ``_thread``)."""

    def __init__(self, *, busy: Callable[[], int], total: Callable[[], int],
                 done: Callable[[], int], children: Callable[[], list],
                 loop_alive: Callable[[float], bool], heartbeater: Callable[[], Any],
                 notify: Notify | None = None) -> None:
        self.busy, self.total, self.done, self.children = busy, total, done, children
        self.loop_alive, self.heartbeater = loop_alive, heartbeater
        self.notify = notify if notify is not None else Notify.from_env()
        self.stopping_sent = False
        self._ready_pending = True  # READY=1 not yet sent for the current generation
        self._note = ""  # appended to STATUS= (a failed reload)
        self.readied = asyncio.Event()  # the first READY=1 was sent: the watchdog pings from then
        self.watchdog = Watchdog(self)

    # --- the master's hooks ---------------------------------------------------------------

    def child_ready(self) -> None:
        """A child reported ready: send READY=1 once no child of this generation is starting."""
        if not self._ready_pending or self.stopping_sent:
            return
        current = self.children()
        if current and all(c.state is not ChildState.STARTING for c in current):
            self.ready()

    def ready(self) -> None:
        self._ready_pending = False
        self.notify.send(ready=1, status=self.render_status(), mainpid=os.getpid())
        self.readied.set()

    def reloading(self) -> None:
        self._ready_pending = True
        self._note = ""
        self.notify.send(reloading=1, monotonic_usec=monotonic_usec(), status="reloading")

    def reload_failed(self, why: str) -> None:
        """The reload failed and the old generation keeps serving: READY=1, and STATUS= says so."""
        self._note = f"; reload failed ({why}), the old generation serves"
        self.ready()

    def stopping(self) -> None:
        self._ready_pending = False
        if not self.stopping_sent:
            self.stopping_sent = True
            self.notify.send(stopping=1, status=f"stopping: {self.busy()} busy")

    def render_status(self) -> str:
        return f"{self.busy()}/{self.total()} busy, {self.done()} jobs done{self._note}"

    def watchdog_interval(self) -> float:
        return self.notify.watchdog_usec / 2e6 if self.notify.watchdog_usec else 0.0

    def healthy(self) -> bool:
        """The event loop ticked within the ping interval and the heartbeater thread lives.
        Database trouble does not withhold pings: a restart would not cure it, and the
        heartbeater's own deadline already fences what it cannot renew."""
        if not self.loop_alive(max(self.watchdog_interval(), 1.0)):
            return False
        thread = getattr(self.heartbeater(), "_thread", None)
        return thread is None or thread.is_alive()


class Watchdog(Service):
    """WATCHDOG=1 and STATUS= from the event loop, once the first READY=1 was sent (a no-op
    without $NOTIFY_SOCKET). Stopped last: the socket closes with it."""

    name = "watchdog"

    def __init__(self, hooks: SystemdHooks) -> None:
        super().__init__()
        self.hooks = hooks
        self.sent_status = ""  # the last STATUS= sent

    async def stop(self, timeout: float | None = None) -> None:
        await super().stop(timeout)
        self.hooks.notify.close()

    async def _run(self) -> None:
        hooks = self.hooks
        if not hooks.notify.enabled:
            return
        await hooks.readied.wait()
        interval = hooks.watchdog_interval()
        period = min(interval, 1.0) if interval else 1.0
        last_ping = 0.0
        while True:
            now = time.monotonic()
            fields: dict[str, Any] = {}
            if interval and now - last_ping >= interval * 0.9:
                if hooks.healthy():
                    fields["watchdog"] = 1
                    last_ping = now
                else:
                    event(log, logging.WARNING, "systemd.watchdog_withheld",
                          note="event loop or heartbeater unhealthy; systemd will restart the master")
            status = hooks.render_status()
            if status != self.sent_status and not hooks.stopping_sent:
                fields["status"] = self.sent_status = status
            if fields:
                hooks.notify.send(**fields)
            await asyncio.sleep(period)
