"""The ``event: job`` lines of the events stream: each recorded transition (migration 0017) a
stream asked for, by job, queue or event.

The summary poller (jobrun.web.events) reads them too, on the same connection and the same
clock, and only while a stream that asked for them is open: one read a tick for every such
stream together, of the events numbered after the last one seen (the primary key on ``seq``),
at most ``BATCH`` a read. Each stream filters what it is given and holds at most ``BUFFER``
events not yet sent; past that it drops the oldest and says so (``event: job_gap``, with how
many), as it does when the log ran more than ``MAX_BEHIND`` events ahead of the reader (a
fast drain): the stream skips ahead rather than fall further behind.

The stream is live, not the record: a transaction that drew its event numbers before another
but commits after the stream read that other's is caught when it lands within the last
``RECHECK`` numbers read (each read looks that far back, and sends an event once); one later
still is missed. ``GET /api/v1/jobs/{id}/events`` is the record.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

BATCH = 1000        # events read a tick at most
BUFFER = 1000       # events one stream holds unsent at most
MAX_BEHIND = 20000  # past this many events behind the log, the reader skips ahead
RECHECK = 256       # each read looks this many numbers back for late commits
MAX_JOBS = 100      # job ids one stream may name


@dataclass(frozen=True)
class JobFilter:
    """Which events one stream wants: those of any job in ``jobs``, queue in ``queues`` and
    event in ``events`` (an empty set does not filter)."""

    jobs: frozenset[int] = frozenset()
    queues: frozenset[str] = frozenset()
    events: frozenset[str] = frozenset()

    def matches(self, row: dict[str, Any]) -> bool:
        return ((not self.jobs or row["job_id"] in self.jobs)
                and (not self.queues or row.get("queue") in self.queues)
                and (not self.events or row["event"] in self.events))


class Pending:
    """One stream's unsent job events, bounded; what it had to drop is counted."""

    def __init__(self, wanted: JobFilter, size: int = BUFFER) -> None:
        self.wanted = wanted
        self.events: deque[str] = deque(maxlen=size)
        self.dropped = 0
        # False until the first read after the stream opened: until then the stream sends
        # nothing, so that its first frame means every later transition will reach it.
        self.primed = False

    def offer(self, data: str) -> None:
        if len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.events.append(data)

    def take(self) -> tuple[list[str], int]:
        out, dropped = list(self.events), self.dropped
        self.events.clear()
        self.dropped = 0
        return out, dropped


def event_text(row: dict[str, Any], plain: Callable[[Any], Any]) -> str:
    return json.dumps({k: row[k] for k in ("seq", "job_id", "queue", "task", "at", "event",
                                           "status", "attempt", "owner", "actor", "outcome",
                                           "detail") if k in row},
                      default=plain, separators=(",", ":"))


class Reader:
    """Where the stream is in the log, and the numbers it already sent (the recheck window)."""

    def __init__(self) -> None:
        self.mark: int | None = None  # highest seq seen; None: start at the log's end
        self.floor = 0  # where it started: nothing at or before it is sent
        self._sent: deque[int] = deque(maxlen=BATCH + RECHECK)
        self._sent_set: set[int] = set()

    def reset(self, at: int | None = None) -> None:
        """Start over at ``at`` (None: at the log's end, at the next read)."""
        self.mark = at
        self.floor = at or 0
        self._sent.clear()
        self._sent_set.clear()

    def after(self) -> int:
        return max(self.floor, (self.mark or 0) - RECHECK)

    def fresh(self, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The rows not sent before, in order; moves the mark."""
        out = []
        for row in rows:
            seq = row["seq"]
            if seq in self._sent_set:
                continue
            if len(self._sent) == self._sent.maxlen:
                self._sent_set.discard(self._sent[0])
            self._sent.append(seq)
            self._sent_set.add(seq)
            out.append(row)
            if self.mark is None or seq > self.mark:
                self.mark = seq
        return out


def read(conn: Any, q: Any, reader: Reader) -> tuple[list[dict[str, Any]], int]:
    """New events since the reader's mark (at most BATCH), and how many it skipped ahead."""
    skipped = 0
    top = conn.execute(q.stream_events_mark).fetchone()["seq"]
    if reader.mark is None or top - reader.mark > MAX_BEHIND:
        if reader.mark is not None:
            skipped = top - reader.mark
        reader.reset(top)
        return [], skipped
    rows = conn.execute(q.stream_events, {"after": reader.after(),
                                          "limit": BATCH + RECHECK}).fetchall()
    return reader.fresh(rows), skipped
