"""The master's signal handlers and its shutdown, kept apart from the wiring in master.py.

Each ``handle_<signal>`` is one small method a test can call without sending a signal; the
handlers are registered with ``loop.add_signal_handler`` (already a self-pipe), so they run on
the event loop, never inside a real signal context.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from jobrun.logs import event

log = logging.getLogger("jobrun.master")


class SignalsAndShutdown:
    """Mixed into Master: uses its settings, supervisor, services and events."""

    # --- signals (each callable from a test without sending a signal) ---------------------

    def handle_term(self) -> None:
        """Drain: stop claiming; give in-flight jobs --grace seconds; release the rest."""
        if self.stopping:
            self.handle_quit()
            return
        event(log, logging.INFO, "master.draining", grace=self.settings.grace, busy=self.busy())
        self.systemd.stopping()  # systemd hook: STOPPING=1
        self.stopping = "drain"
        self.loop.create_task(self._shutdown())

    handle_int = handle_term

    def handle_quit(self) -> None:
        """Fast stop: kill children now and release their jobs back to the queue."""
        self._fast.set()
        if self.stopping:
            self.stopping = "fast"
            return
        event(log, logging.INFO, "master.stopping_fast", busy=self.busy())
        self.systemd.stopping()  # systemd hook: STOPPING=1
        self.stopping = "fast"
        self.loop.create_task(self._shutdown())

    def handle_hup(self) -> None:
        """Reload settings, start a new generation of children, retire the old one gracefully."""
        if self.stopping:
            return
        self.systemd.reloading()  # systemd hook: RELOADING=1; READY=1 when the new children are up
        if self.reload_settings is not None:
            try:
                new = self.reload_settings()
            except Exception as exc:  # noqa: BLE001 - keep running on a bad config
                event(log, logging.ERROR, "reload.failed", error=str(exc))
                self.systemd.reload_failed()  # systemd hook: READY=1 (the old settings stay)
                return
            keep = {"app": self.settings.app, "schema": self.settings.schema,
                    "database_url": self.settings.database_url}
            self.settings = replace(new, **keep)
            self.target = self.settings.concurrency
            self.supervisor.max_tasks = self.settings.max_tasks_per_child
            self.supervisor.max_memory_bytes = self.settings.max_memory_per_child * 1024 * 1024
            self.supervisor.soft_time_limit = self.settings.soft_time_limit
            self.notifier.queues.clear()
            self.notifier.queues.update(self.settings.queues)
        self.generation += 1
        event(log, logging.INFO, "master.reload", generation=self.generation, concurrency=self.target)
        for child in self.supervisor.alive():
            if child.generation != self.generation and child.state != "busy":
                self.supervisor.stop(child)
            elif child.generation != self.generation:
                child.state = "retiring"
        self._replenish()

    def handle_ttin(self) -> None:
        """One child more."""
        if self.stopping:
            return
        self.target += 1
        event(log, logging.INFO, "master.resize", concurrency=self.target)
        self._replenish()
        self._title()

    def handle_ttou(self) -> None:
        """One child fewer (an idle one if there is one), never below one."""
        if self.stopping or self.target <= 1:
            return
        self.target -= 1
        event(log, logging.INFO, "master.resize", concurrency=self.target)
        current = self._current()
        if len(current) > self.target:
            victim = next((c for c in current if c.state in ("idle", "starting")), current[-1])
            self.supervisor.stop(victim)
        self._title()

    # --- shutdown -------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        claimer = getattr(self, "_claimer", None)
        if claimer is not None:
            # Let a claim in flight finish and hand its jobs out (cancelled, its rows would stay
            # leased, undelivered, until their leases expired); the loop then sees stopping.
            self.wake()
            await asyncio.wait([claimer], timeout=5.0)
            claimer.cancel()
        await self.notifier.stop()
        if self.stopping == "drain" and self.busy():
            waiter = self.loop.create_task(self._wait_idle())
            fast = self.loop.create_task(self._fast.wait())
            await asyncio.wait([waiter, fast], timeout=self.settings.grace,
                               return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            fast.cancel()
        for child in self.supervisor.alive():
            if child.job is not None:
                self.supervisor.kill(child, "shutdown")
            elif child.state == "starting":
                self.supervisor.kill(child, "stopping")
            else:
                self.supervisor.stop(child)
        if not await self._wait_exited(5.0):
            for child in self.supervisor.alive():
                self.supervisor.kill(child, "stopping")
            await self._wait_exited(5.0)
        if self._unclaims:  # jobs that waited in children's pipes, going back to the queue
            await asyncio.wait(set(self._unclaims), timeout=5.0)
        self.heartbeater.stop()
        if self.completer.running and not await self.completer.drain(10.0):
            event(log, logging.ERROR, "shutdown.unrecorded", jobs=len(self.completer.pending),
                  note="outcomes could not be written; those leases will expire and be reaped")
        await self.completer.stop()
        await self.reaper.stop()
        await self.registry.stop()
        if self.http is not None:
            await self.http.stop()
        ticker = getattr(self, "_ticker", None)
        if ticker is not None:
            ticker.cancel()
        self.systemd.stop()  # systemd hook
        event(log, logging.INFO, "master.stopped", exit_code=self.exit_code)
        self.done.set()

    async def _wait_idle(self) -> None:
        while self.busy():
            await self._changed()

    async def _wait_exited(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.supervisor.alive():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed(), remaining)
            except asyncio.TimeoutError:
                return False
        return True

    async def _changed(self) -> None:
        """Resolve at the next child frame or exit (both call wake())."""
        self.wake_event.clear()
        await self.wake_event.wait()
