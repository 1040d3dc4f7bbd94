"""``GET /api/v1/events``: a server-sent-events stream of the queue's state, coalesced.

The console keeps its pages current from this stream instead of polling each endpoint. Under
a fast drain thousands of jobs change state per second; sending the browser one event per job
(or running one query per job) would flood the page and load the database the queue needs.
So the stream is a *summary*, computed on a clock, never per job:

- One :class:`Summaries` per web process, shared by every open stream, reads one frame
  (:class:`jobrun.web.summary.StreamSummary`: the figures of ``jobrun top`` — depth by status,
  rates in and done, wait p50/p95, live masters with their busy children and in-flight jobs,
  the latest failures — from bounded reads: depth through the partial indexes, rates from what
  moved since the previous read; one read-only REPEATABLE READ transaction) on its own
  connection, only while someone is subscribed. Its cost does not grow with the number of
  open pages, nor with the history the table keeps.
- The poll's pace adapts: after a frame that changed (a busy queue) the next read comes
  ``interval`` s later (0.25 by default, the floor: at most one summary per 250 ms however
  many jobs move), after an unchanged one ``idle_interval`` s later (1.0); and never sooner
  than ``cost_factor`` (20) times what the last read took, so the poll's own database time
  stays under about 1/20 of one backend's even when the queue is deep (at most
  ``MAX_INTERVAL`` s apart).
- A frame equal to the previous one (times and ages aside) is not sent. An idle queue costs a
  keep-alive comment every 15 s and nothing else.
- Each subscriber holds only the newest frame: a slow browser skips frames instead of queuing
  them, so the stream never buffers. Below it, what one stream can have queued is bounded by
  the connection (jobrun.web.connections): a 64 KiB kernel send buffer and the transport's
  64 KiB; a reader that takes nothing more for ``--request-timeout`` s then is dropped
  (``web.connection_stalled``), and at shutdown every open stream is closed at once.

Events: ``snapshot`` (the first frame, on connect), ``summary`` (a changed frame), ``error``
(the database cannot be read: ``{"error": ...}``; frames resume when it is back). Each
``data`` is one JSON object: ``{"seq", "at", "queues", "masters", "stale_masters", "failures",
"inflight"}`` as in :meth:`jobrun.observe.Snapshot.to_dict`.

A stream that names ``job``, ``queue`` or ``event`` (each repeatable), or ``jobs=true`` (every
job), also gets ``job``: one per recorded transition it matches (``{"seq", "job_id", "queue",
"task", "at", "event", "status", ...}``), and ``job_gap`` (``{"dropped": n}``) when it missed
some. Such a stream's first frame comes after the first read of the log from its start: every
transition that commits after the client has it is sent (bounds and the one exception:
jobrun.web.job_feed).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import Query
from starlette.responses import StreamingResponse

from jobrun import validate
from jobrun.errors import InvalidInput, JobrunError
from jobrun.events import KINDS
from jobrun.logs import event
from jobrun.observe import Source
from jobrun.sql import Queries
from jobrun.web import job_feed
from jobrun.web.envelope import ApiError
from jobrun.web.job_feed import JobFilter, Pending
from jobrun.web.summary import StreamSummary

log = logging.getLogger("jobrun.web.events")

PATH = "/api/v1/events"
MIN_INTERVAL = 0.25   # at most one summary per 250 ms
IDLE_INTERVAL = 1.0   # between reads while nothing changes
COST_FACTOR = 20.0    # a read that took t waits at least COST_FACTOR * t before the next
MAX_INTERVAL = 5.0
KEEPALIVE = 15.0
# Fields that move on every frame without anything having happened (the clock, ages, run time
# of in-flight jobs); a frame that differs only in these is not sent.
_CLOCK_FIELDS = frozenset({"at", "uptime", "last_seen", "last_seen_ago", "age", "oldest_age",
                           "elapsed", "rate_seconds"})


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in _CLOCK_FIELDS}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


class _Subscriber:
    """The newest frame not yet sent to one client, and a flag that one is waiting."""

    def __init__(self, wanted: JobFilter | None = None) -> None:
        self.frame: tuple[str, str] | None = None
        self.ready = asyncio.Event()
        self.jobs = Pending(wanted) if wanted is not None else None  # its job events

    def offer(self, kind: str, data: str) -> None:
        self.frame = (kind, data)  # replaces an unsent older frame: coalescing per client
        self.ready.set()

    def take(self) -> tuple[str, str] | None:
        frame, self.frame = self.frame, None
        self.ready.clear()
        return frame


class Summaries:
    """One poller shared by every open stream of a web process."""

    def __init__(self, fetch: Callable[[], dict[str, Any]], interval: float = MIN_INTERVAL,
                 idle_interval: float = IDLE_INTERVAL, cost_factor: float = COST_FACTOR,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 fetch_events: Callable[[job_feed.Reader], tuple[list[dict], int]] | None = None,
                 ) -> None:
        self.fetch = fetch  # blocking; runs in a thread
        self.fetch_events = fetch_events  # blocking too: job events after the reader's mark
        self.reader = job_feed.Reader()
        self.sleep = sleep  # the pause between reads (a test paces the poller with its own)
        self.interval = max(MIN_INTERVAL, interval)
        self.idle_interval = max(self.interval, idle_interval)
        self.cost_factor = cost_factor
        self.frames = 0  # frames read from the database (for tests and measurements)
        self.last_cost = 0.0  # seconds the last read took
        self._subscribers: set[_Subscriber] = set()
        self._task: asyncio.Task | None = None
        self._last: tuple[str, str] | None = None
        self._last_key: Any = None
        self._seq = 0

    @classmethod
    def for_database(cls, dsn: str, queries: Queries, interval: float = MIN_INTERVAL) -> "Summaries":
        source = Source(dsn, queries)
        summary = StreamSummary()
        return cls(lambda: source.run(summary.read), interval,
                   fetch_events=lambda reader: source.run(job_feed.read, reader))

    def pause_after(self, changed: bool) -> float:
        """Seconds until the next read: the busy or idle pace, stretched by the read's cost."""
        pace = self.interval if changed else self.idle_interval
        return min(MAX_INTERVAL, max(pace, self.cost_factor * self.last_cost))

    async def stream(self, wanted: JobFilter | None = None) -> AsyncIterator[str]:
        """SSE text for one client: the current frame first, then each changed one; with
        ``wanted``, the job events it matches too."""
        sub = _Subscriber(wanted)
        self._subscribers.add(sub)
        if self._last is not None:
            sub.offer("snapshot", self._last[1])
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._poll(), name="jobrun-web-events")
        first = True
        try:
            while True:
                try:
                    await asyncio.wait_for(sub.ready.wait(), KEEPALIVE)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                if sub.jobs is not None and not sub.jobs.primed:
                    sub.ready.clear()  # held until the job events are read from here on
                    continue
                frame = sub.take()
                if frame is not None:
                    kind, data = frame
                    if first and kind == "summary":
                        kind = "snapshot"
                    first = False
                    yield f"event: {kind}\ndata: {data}\n\n"
                if sub.jobs is not None:
                    sent, dropped = sub.jobs.take()
                    if dropped:
                        yield f'event: job_gap\ndata: {{"dropped":{dropped}}}\n\n'
                    for data in sent:
                        yield f"event: job\ndata: {data}\n\n"
        finally:
            self._subscribers.discard(sub)

    async def _poll(self) -> None:
        while self._subscribers:
            moved = await self._tick_jobs()  # first: a stream's snapshot follows its start
            changed = await self._tick()
            await self.sleep(self.pause_after(changed or moved))
        self._last = self._last_key = None  # nobody listening: the next stream reads afresh

    async def _tick(self) -> bool:
        """Read one frame and publish it if it changed; whether it did."""
        started = time.monotonic()
        try:
            frame = await asyncio.to_thread(self.fetch)
        except JobrunError as exc:
            self._last_key = None
            self._publish("error", json.dumps({"error": str(exc)}))
            return False
        except Exception as exc:  # the stream must outlive a bad frame; say what broke
            event(log, logging.ERROR, "web.events.frame_failed", error=repr(exc))
            self._publish("error", json.dumps({"error": f"could not read the queue state: {exc}"}))
            return False
        finally:
            self.last_cost = time.monotonic() - started
        self.frames += 1
        key = _without_clock(frame)
        if key == self._last_key:
            return False
        self._last_key = key
        self._seq += 1
        data = json.dumps({"seq": self._seq, **frame}, default=_plain, separators=(",", ":"))
        self._last = ("summary", data)
        self._publish("summary", data)
        return True

    async def _tick_jobs(self) -> bool:
        """Read the job events after the last seen and hand each stream those it wants;
        whether any were read. Nothing is read while no stream wants them."""
        wanting = [sub for sub in self._subscribers if sub.jobs is not None]
        if not wanting or self.fetch_events is None:
            self.reader.reset()  # the next stream that wants them starts at the log's end
            return False
        try:
            rows, skipped = await asyncio.to_thread(self.fetch_events, self.reader)
        except Exception as exc:  # the summary's read says what broke; go on next tick
            event(log, logging.WARNING, "web.events.jobs_failed", error=repr(exc)[:200])
            for sub in wanting:  # their frames are not held back by it
                assert sub.jobs is not None
                if not sub.jobs.primed:
                    sub.jobs.primed = True
                    sub.ready.set()
            return False
        for sub in wanting:
            assert sub.jobs is not None
            if not sub.jobs.primed:  # it gets what came after this read, and its frames now
                sub.jobs.primed = True
                sub.ready.set()
                continue
            sub.jobs.dropped += skipped
            for row in rows:
                if sub.jobs.wanted.matches(row):
                    sub.jobs.offer(job_feed.event_text(row, _plain))
            if sub.jobs.events or sub.jobs.dropped:
                sub.ready.set()
        return bool(rows)

    def _publish(self, kind: str, data: str) -> None:
        for sub in self._subscribers:
            sub.offer(kind, data)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None


def job_filter(job: list[int], queue: list[str], event_: list[str],
               everything: bool) -> JobFilter | None:
    """The job events a stream asked for (None: none), its values checked: one clear line
    (a 422) for a bad one."""
    if not (job or queue or event_ or everything):
        return None
    if len(job) > job_feed.MAX_JOBS:
        raise ApiError("validation_failed", f"at most {job_feed.MAX_JOBS} job ids a stream",
                       {"job": f"{len(job)} given"})
    bad = next((j for j in job if not 1 <= j < 2**63), None)
    if bad is not None:
        raise ApiError("validation_failed", f"invalid job id {bad}", {"job": "1 or more"})
    for name in queue:
        try:
            validate.queue_name(name)
        except InvalidInput as exc:
            raise ApiError("validation_failed", str(exc), {"queue": "a queue name"}) from None
    unknown = next((k for k in event_ if k not in KINDS), None)
    if unknown is not None:
        raise ApiError("validation_failed", f"invalid event {unknown[:40]!r}: one of"
                       f" {', '.join(KINDS)}", {"event": "an event's name"})
    return JobFilter(frozenset(job), frozenset(queue), frozenset(event_))


def install(app: Any, dsn: str, queries: Queries, interval: float = MIN_INTERVAL) -> Summaries:
    """Add ``GET /api/v1/events`` to a FastAPI ``app``. The poller runs only while a stream is
    open, so it needs no shutdown hook: it ends with the last stream."""
    summaries = Summaries.for_database(dsn, queries, interval)

    async def events(job: Annotated[list[int], Query()] = [],
                     queue: Annotated[list[str], Query()] = [],
                     event: Annotated[list[str], Query()] = [], jobs: bool = False):
        wanted = job_filter(job, queue, event, jobs)
        return StreamingResponse(summaries.stream(wanted), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # Not in the OpenAPI document, which describes the JSON endpoints; docs/console.md does.
    app.add_api_route(PATH, events, methods=["GET"], include_in_schema=False)
    app.state.summaries = summaries
    return summaries
