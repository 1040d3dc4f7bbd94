"""The one lifecycle every long-lived part of the master shares.

``start()`` launches the part's coroutine as a task; ``stop()`` is safe twice and safe before
``start()``, and returns only once the part has stopped. Parts implement ``_run()``.
"""

from __future__ import annotations

import asyncio
import logging

from jobrun.logs import event

log = logging.getLogger("jobrun.master")


class Service:
    name = "service"

    def __init__(self) -> None:
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def _guarded(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception:
            event(log, logging.CRITICAL, "service.crashed", service=self.name)
            log.exception("service %s crashed", self.name)
            raise

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._guarded(), name=self.name)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass


async def backoff_sleep(attempt: int, base: float = 0.1, cap: float = 5.0) -> None:
    """Wait before retrying a failed database operation (a retry pause, not synchronisation)."""
    await asyncio.sleep(min(cap, base * (2 ** min(attempt, 10))))
