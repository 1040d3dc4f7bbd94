"""The per-job counters and histograms, tallied per event-loop turn.

Every job the master claims adds to ``jobrun_job_wait_seconds``; every result it records to
``jobrun_jobs_total`` and (for a job that ran) ``jobrun_job_duration_seconds``. Done one job
at a time through prometheus_client, that is a lock and a loop over the buckets each: a tenth
of what the master spent on a noop job. The tally keeps plain counts (one dict entry a label
set, one bucket index a value) as jobs come and go, on the event loop only, and adds them to
the families at the end of the loop's turn: ``inc(n)`` once a label set, each bucket's count
once. A scrape (served on the same loop) sees every job recorded before the turn it runs in.

A family teed into OpenTelemetry (worker/otelmetrics.py) is given each value as before: its
instrument records values, not counts.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any, Callable

from prometheus_client import Histogram

from jobrun.worker.metrics import DURATION_BUCKETS, WAIT_BUCKETS

# A histogram's tally: [count per bucket (the last: above every bound, +Inf)..., sum, values].
_Entry = list


class JobTally:
    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics  # its families are read at each flush (a tee may replace them)
        self._counts: dict[tuple[str, str, str], int] = {}
        self._durations: dict[tuple[str, ...], _Entry] = {}
        self._waits: dict[tuple[str, ...], _Entry] = {}
        self._children: dict[tuple[str, tuple[str, ...]], Any] = {}
        self._due = False

    # --- as jobs come and go (event loop) -------------------------------------------------

    def count(self, queue: str, task: str, outcome: str) -> None:
        """A job of ``task`` ended with ``outcome``: jobrun_jobs_total."""
        key = (queue, task, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._soon()

    def duration(self, queue: str, task: str, seconds: float) -> None:
        """How long an attempt ran: jobrun_job_duration_seconds."""
        self._add(self._durations, (queue, task), DURATION_BUCKETS, seconds, "duration")

    def wait(self, queue: str, seconds: float) -> None:
        """How long a claimed job waited, runnable: jobrun_job_wait_seconds."""
        self._add(self._waits, (queue,), WAIT_BUCKETS, seconds, "wait")

    def _add(self, table: dict, key: tuple[str, ...], bounds: tuple, value: float,
             family: str) -> None:
        entry = table.get(key)
        if entry is None:
            # The values themselves are kept only for a family teed into OpenTelemetry.
            teed = not isinstance(getattr(self.metrics, family), Histogram)
            entry = table[key] = [0] * (len(bounds) + 1) + [0.0, [] if teed else None]
        entry[bisect.bisect_left(bounds, value)] += 1  # (le: the first bound >= the value)
        entry[-2] += value
        if entry[-1] is not None:
            entry[-1].append(value)
        self._soon()

    def _soon(self) -> None:
        if not self._due:
            self._due = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a test driving the dispatcher): at once
                self.flush()

    # --- once a loop turn -----------------------------------------------------------------

    def flush(self) -> None:
        self._due = False
        counts, self._counts = self._counts, {}
        for key, n in counts.items():
            self._child("jobs", key).inc(n)
        durations, self._durations = self._durations, {}
        self._flush(durations, "duration")
        waits, self._waits = self._waits, {}
        self._flush(waits, "wait")

    def _child(self, family: str, key: tuple[str, ...]) -> Any:
        child = self._children.get((family, key))
        if child is None:
            child = self._children[(family, key)] = getattr(self.metrics, family).labels(*key)
        return child

    def _flush(self, table: dict, family: str) -> None:
        for key, entry in table.items():
            histogram = self._child(family, key)
            if isinstance(histogram, Histogram):
                # The family's own bucket values (the last is +Inf), each count added at
                # once: what observe() does, n times over.
                buckets = histogram._buckets  # noqa: SLF001
                for i, n in enumerate(entry[:-2]):
                    if n:
                        buckets[i].inc(n)
                histogram._sum.inc(entry[-2])  # noqa: SLF001
            else:
                observe: Callable[[float], None] = histogram.observe
                for value in entry[-1]:
                    observe(value)
