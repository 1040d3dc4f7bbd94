"""The job counters and run-time histograms, tallied per event-loop turn.

Every result the master records adds to ``jobrun_jobs_total`` and (for a job that ran) to
``jobrun_job_duration_seconds``. Done one job at a time through prometheus_client, that is a
lock and a loop over the buckets each, a tenth of what the master spends on a noop job. The
tally keeps plain counts (one dict entry a label set, one bucket index a run time) as results
come in, on the event loop only, and adds them to the families at the end of the loop's turn:
``inc(n)`` once a label set, each bucket's count once. A scrape (served on the same loop) sees
every result recorded before the turn it runs in.

A family teed into OpenTelemetry (worker/otelmetrics.py) is given each run time as before:
its instrument records values, not counts.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

from prometheus_client import Histogram

from jobrun.worker.metrics import DURATION_BUCKETS


class JobTally:
    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics  # .jobs and .duration: read at each flush (a tee may replace them)
        self._counts: dict[tuple[str, str, str], int] = {}
        self._times: dict[tuple[str, str], list] = {}  # -> [bucket counts..., sum, values]
        self._counters: dict[tuple[str, str, str], Any] = {}
        self._histograms: dict[tuple[str, str], Any] = {}
        self._due = False

    def count(self, queue: str, task: str, outcome: str) -> None:
        key = (queue, task, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1
        self._soon()

    def duration(self, queue: str, task: str, seconds: float) -> None:
        entry = self._times.get((queue, task))
        if entry is None:
            entry = self._times[(queue, task)] = [0] * (len(DURATION_BUCKETS) + 1) + [0.0, []]
        entry[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1  # (le: the first bound >= it)
        entry[-2] += seconds
        entry[-1].append(seconds)
        self._soon()

    def _soon(self) -> None:
        if not self._due:
            self._due = True
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a test driving the dispatcher): at once
                self.flush()

    def flush(self) -> None:
        self._due = False
        counts, self._counts = self._counts, {}
        for key, n in counts.items():
            counter = self._counters.get(key)
            if counter is None:
                counter = self._counters[key] = self.metrics.jobs.labels(*key)
            counter.inc(n)
        times, self._times = self._times, {}
        for key, entry in times.items():
            histogram = self._histograms.get(key)
            if histogram is None:
                histogram = self._histograms[key] = self.metrics.duration.labels(*key)
            if isinstance(histogram, Histogram):
                # The family's own bucket values (the last is +Inf), counts added at once
                # rather than one observe() a job: what observe() does, n times.
                buckets = histogram._buckets  # noqa: SLF001
                for i, n in enumerate(entry[:-2]):
                    if n:
                        buckets[i].inc(n)
                histogram._sum.inc(entry[-2])  # noqa: SLF001
            else:
                for seconds in entry[-1]:
                    histogram.observe(seconds)
