"""Wake-ups for the worker protocol's long polls, from the channel masters LISTEN on.

A remote worker that finds nothing to claim waits (``wait`` seconds, bounded) instead of
asking again and again. Its claim waits on this module: one LISTEN connection per web
process, on ``<schema>_ready`` (the notifications producers and limit releases send, payload
the queue name), shared by every waiting claim however many there are, and open only while
one waits. A notification for a queue wakes the claims waiting on that queue; each then claims
once more.

What no notification announces is covered by a floor, as a master's claimer covers it: a job
whose ``run_at`` arrives, or a notification sent while the connection was being (re)made. A
waiting claim looks again every ``poll_interval`` s (the masters' setting) at most, so a
remote worker costs the database no more than a master's idle claimer. A (re)connect wakes
every waiter. A failed connection is retried after a pause; meanwhile the floor alone wakes
the waiters.

Register before the claim that found nothing, wait after it: a notification between the two
is not lost (:meth:`Wakeups.waiter` then :meth:`Waiter.wait`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable


from jobrun.logs import event
from jobrun.store import db

log = logging.getLogger("jobrun.web.wakeups")
RETRY_PAUSE = 1.0  # seconds between attempts to (re)open the LISTEN connection


class Waiter:
    """One waiting claim: the queues it serves and an event set by a matching notification."""

    def __init__(self, owner: "Wakeups", queues: Iterable[str]) -> None:
        self.owner = owner
        self.queues = frozenset(queues)
        self.woken = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """Until a notification for one of the queues (True) or ``timeout`` s (False)."""
        try:
            await asyncio.wait_for(self.woken.wait(), max(0.0, timeout))
            return True
        except TimeoutError:
            return False

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.owner._leave(self)


class Wakeups:
    def __init__(self, dsn: str, listen: str) -> None:
        self.dsn = dsn
        self.listen = listen  # the LISTEN statement (query listen_ready)
        self._waiters: set[Waiter] = set()
        self._by_queue: dict[str, set[Waiter]] = {}  # a notification touches its queue's only
        self._task: asyncio.Task | None = None
        self.notifications = 0  # read by tests

    def waiter(self, queues: Iterable[str]) -> Waiter:
        """A waiter registered now (use it as a context manager: it leaves on exit)."""
        waiter = Waiter(self, queues)
        self._waiters.add(waiter)
        for queue in waiter.queues:
            self._by_queue.setdefault(queue, set()).add(waiter)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="jobrun-web-wakeups")
        return waiter

    def _leave(self, waiter: Waiter) -> None:
        self._waiters.discard(waiter)
        for queue in waiter.queues:
            others = self._by_queue.get(queue)
            if others is not None:
                others.discard(waiter)
                if not others:
                    del self._by_queue[queue]

    def wake(self, queue: str | None = None) -> None:
        """Wake the waiters of ``queue`` (None: every waiter)."""
        for waiter in self._waiters if queue is None else self._by_queue.get(queue, ()):
            waiter.woken.set()

    async def _run(self) -> None:
        while self._waiters:
            conn = None
            try:
                conn = await db.connect_async(self.dsn)
                await conn.execute(self.listen)
                self.wake()  # what was sent while no connection listened
                while self._waiters:  # notifies() returns each RETRY_PAUSE: anyone left?
                    async for note in conn.notifies(timeout=RETRY_PAUSE):
                        self.notifications += 1
                        self.wake(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the connection broke: the floor covers
                event(log, logging.WARNING, "web.wakeups.lost", error=db.first_line(exc))
                await asyncio.sleep(RETRY_PAUSE)
            finally:
                if conn is not None:
                    try:
                        await conn.close()
                    except Exception:  # noqa: BLE001
                        pass

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
