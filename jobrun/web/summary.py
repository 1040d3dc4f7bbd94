"""The events stream's summary of the queue: the figures of ``jobrun top``, read cheaply.

``jobrun top``'s frame (:func:`jobrun.observe.snapshot`) counts every job enqueued and
finished in the last 60 s and sorts a 2,000-job wait sample on each read; twice a second
during a fast drain that cost the drain about 10 % of its throughput (docs/console.md). The
stream reads the same shape of frame with work bounded by the queue's depth and by what moved
since its previous read (sql/stream.sql):

- **depth** (queued, scheduled, leased, oldest runnable): counted through the partial indexes
  on queued and leased rows, as stored at the read.
- **enqueued/s**: jobs whose id is above the previous read's highest id (a primary-key range),
  summed over the reads of the last ``RATE_WINDOW`` s and divided by the time they cover
  (``rate_seconds`` in the frame: shorter while the stream is younger than ``RATE_WINDOW``;
  the rates are ``None`` on its first read).
- **done/s**: jobs that reached succeeded, dead or cancelled with ``finished_at`` between the
  previous read's mark and this one's (a range of the finished-jobs index), summed the same
  way. A read's mark is its clock minus ``LAG`` s, so a completion that commits up to ``LAG``
  s after its ``finished_at`` is still counted; done/s trails the clock by ``LAG``.
- **wait p50/p95** (start minus the time the job became runnable): over the newest
  ``WAIT_SAMPLE`` waits per queue of jobs that finished in the last ``observe.WAIT_WINDOW`` s, kept
  here between reads: each read adds at most ``WAIT_SAMPLE`` per queue from its range; the
  first read seeds them from the newest ``WAIT_SAMPLE`` finished jobs of all queues.
- **failures**: failed attempts in the last ``observe.FAIL_WINDOW`` s (a partial index on failed
  attempts); masters, latest failures and schedules as in ``jobrun top``.

Approximations, by design: a job enqueued in a transaction that commits after a read which
already saw a higher id is never counted in enqueued/s; one whose completion commits more than
``LAG`` s after its ``finished_at`` is never counted in done/s. After a gap longer than
``MAX_GAP`` s between reads (no page was open) the marks start afresh instead of reading
everything that moved in the gap.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from jobrun import observe
from jobrun.sql import Queries

RATE_WINDOW = observe.RATE_WINDOW  # seconds of reads behind enqueued/s and done/s
LAG = 1.0                      # seconds done/s trails the clock (late commits still count)
WAIT_SAMPLE = 500              # waits kept per queue
MAX_GAP = 15.0                 # seconds between reads after which the marks start afresh


def percentiles(values: list[float]) -> tuple[float | None, float | None]:
    """p50 and p95, interpolated between closest ranks (as PostgreSQL's percentile_cont)."""
    if not values:
        return None, None
    if len(values) == 1:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[94]


class Move(NamedTuple):
    """What one read saw move since the previous one (monotonic times), per queue."""

    since: float
    until: float
    enqueued: dict[str, int]
    done: dict[str, int]


class StreamSummary:
    """The marks and recent figures carried from one read to the next. One per poller; its
    :meth:`read` is called by one thread at a time."""

    def __init__(self) -> None:
        self.after_id: int | None = None          # highest job id seen by the previous read
        self.mark: datetime | None = None         # the previous read's finished-jobs mark
        self.read_at: float | None = None         # monotonic time of the previous read
        self.moves: deque[Move] = deque()      # the reads of the rate window, oldest first
        self.waits: dict[str, deque[tuple[datetime, float]]] = {}

    def read(self, conn: psycopg.Connection, q: Queries) -> dict[str, Any]:
        """One frame (the shape of :meth:`jobrun.observe.Snapshot.to_dict`), in one read-only
        snapshot transaction."""
        with conn.transaction():
            conn.execute(q.observe_begin_snapshot)
            rows = conn.execute(q.stream_queues, {"lag": LAG,
                                                  "fail_window": observe.FAIL_WINDOW}).fetchall()
            now, mark = time.monotonic(), rows[0]["mark"]
            if self.read_at is None or now - self.read_at > MAX_GAP:
                self._start(conn, q, mark)
            else:
                self._advance(conn, q, mark, now)
            self.read_at = now
            masters, stale = observe.workers(conn, q)
            snap = observe.Snapshot(
                at=rows[0]["now"], queues=[self._view(r, now) for r in rows if r["queue"]],
                masters=masters, stale_masters=stale, failures=observe.latest_failures(conn, q),
                schedules=conn.execute(q.schedules_for_top, {"limit": 20}).fetchall())
        return {**snap.to_dict(), "rate_seconds": self._span(now) or None}

    def _start(self, conn: psycopg.Connection, q: Queries, mark: datetime) -> None:
        self.after_id = conn.execute(q.stream_highest_id).fetchone()["id"]
        self.mark = mark
        self.moves.clear()
        self.waits = {}
        rows = conn.execute(q.stream_recent_waits, {"upto": mark, "window": observe.WAIT_WINDOW,
                                                    "sample": WAIT_SAMPLE}).fetchall()
        for r in reversed(rows):  # oldest first
            self.waits.setdefault(r["queue"], deque(maxlen=WAIT_SAMPLE)).append(
                (r["finished_at"], r["wait"]))

    def _advance(self, conn: psycopg.Connection, q: Queries, mark: datetime, now: float) -> None:
        moved: dict[str, dict[str, int]] = {"enqueued": {}, "done": {}}
        for r in conn.execute(q.stream_moves, {"after": self.after_id, "since": self.mark,
                                               "upto": mark, "sample": WAIT_SAMPLE}).fetchall():
            moved[r["kind"]][r["queue"]] = r["n"]
            if r["kind"] == "enqueued":
                self.after_id = max(self.after_id or 0, r["max_id"])
            else:
                self._add_waits(r["queue"], mark, r["waits"] or [])
        self.mark = mark
        self.moves.append(Move(self.read_at or now, now, moved["enqueued"], moved["done"]))
        while self.moves and self.moves[0].since < now - RATE_WINDOW:
            self.moves.popleft()

    def _add_waits(self, queue: str, at: datetime, newest_first: list[float]) -> None:
        """Waits of jobs that finished by ``at`` (a read's mark: their age is counted from it)."""
        kept = self.waits.setdefault(queue, deque(maxlen=WAIT_SAMPLE))
        kept.extend((at, w) for w in reversed(newest_first))

    def _span(self, now: float) -> float:
        """Seconds the reads of the rate window cover (0.0 before the second read)."""
        return now - self.moves[0].since if self.moves else 0.0

    def _view(self, row: dict[str, Any], now: float) -> observe.QueueView:
        name = row["queue"]
        span = self._span(now)
        waits = self._recent_waits(name, row["mark"])
        p50, p95 = percentiles(waits)
        return observe.QueueView(
            queue=name, paused=row["paused"], concurrency=row["concurrency"],
            queued=row["queued"], scheduled=row["scheduled"], leased=row["leased"],
            oldest_age=row["oldest_age"],
            enqueued_per_s=self._rate([m.enqueued for m in self.moves], name, span),
            done_per_s=self._rate([m.done for m in self.moves], name, span),
            wait_p50=p50, wait_p95=p95,
            wait_sample=len(waits), failures=row["failures"], waiting=row["waiting"])

    @staticmethod
    def _rate(counts: list[dict[str, int]], queue: str, span: float) -> float | None:
        return sum(c.get(queue, 0) for c in counts) / span if span > 0 else None

    def _recent_waits(self, queue: str, mark: datetime) -> list[float]:
        kept = self.waits.get(queue)
        if not kept:
            return []
        while kept and (mark - kept[0][0]).total_seconds() > observe.WAIT_WINDOW:
            kept.popleft()
        return [w for _, w in kept]
