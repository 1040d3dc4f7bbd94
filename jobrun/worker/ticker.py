"""The ticker: stamps the event loop's liveness (read by the heartbeater thread) and renders
the process title and child gauges when something changed (rendering on every event cost
more than the jobs themselves on a busy master)."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from jobrun.policy import tick_interval
from jobrun.worker.lifecycle import Service


class Ticker(Service):
    name = "ticker"

    def __init__(self, ttl: float, render: Callable[[], None]) -> None:
        super().__init__()
        self.interval = tick_interval(ttl)
        self.render = render
        self.dirty = True
        self.last_tick = time.monotonic()

    def reconfigure(self, settings) -> None:
        self.interval = tick_interval(settings.lease_ttl)

    def loop_alive(self, within: float) -> bool:
        """Whether the loop ticked within ``within`` seconds (safe from any thread)."""
        return time.monotonic() - self.last_tick < within

    def mark_changed(self) -> None:
        self.dirty = True

    async def _run(self) -> None:
        while True:
            self.last_tick = time.monotonic()
            if self.dirty:
                self.dirty = False
                self.render()
            await asyncio.sleep(self.interval)  # the liveness stamp's period
