"""``jobrun bench``: an open-loop load test against a running deployment.

Producers enqueue job i at t0 + i/rate on the monotonic clock, each with its own
``Client.enqueue`` (its own transaction), for ``duration`` seconds. The arrival rate never
waits for the system: a tick reached a whole interval late is skipped and counted (a lagged
tick), not queued up, so a slow database cannot slow the arrivals down and hide its latency
(the coordinated-omission trap). Then it waits for every job it enqueued to finish and reports,
from the database's own timestamps: enqueue-to-start (first attempt started_at - created_at)
and enqueue-to-finish (last attempt finished_at - created_at) percentiles, the achieved rate
and the queue's depth sampled each second. It needs a master serving the queue and a task
that the master's app runs.

Latencies of jobs that failed measure how fast jobrun gives up, not how fast it works: a task
the master's app does not have ends every job ``dead`` at once, with fine figures. So the report
counts the jobs by how they ended (``outcomes``) with the most frequent error, and
:meth:`Report.problem` says what went wrong; ``jobrun bench`` prints it and exits 1 unless
every job succeeded.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from jobrun.client import Client
from jobrun.config import Settings
from jobrun.errors import InvalidInput
from jobrun.sql import for_schema

PERCENTILES = (50, 95, 99)


def percentile(values: list[float], p: float) -> float | None:
    """The p-th percentile (0..100), linear between closest ranks; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def open_loop(t0: float, rate: float, total: int, first: int, step: int,
              send: Callable[[], None], stop: threading.Event) -> tuple[int, int]:
    """Issue ticks first, first+step, ... of the schedule t0 + i/rate; returns (sent, lagged)."""
    interval = step / rate
    sent = lagged = 0
    i = first
    while i < total and not stop.is_set():
        target = t0 + i / rate
        now = time.monotonic()
        if now < target:
            stop.wait(target - now)
            continue
        if now - target >= interval:  # behind by whole intervals: those ticks are lost
            missed = min(int((now - target) / interval), (total - 1 - i) // step + 1)
            lagged += missed
            i += missed * step
            continue
        send()
        sent += 1
        i += step
    return sent, lagged


@dataclass
class Report:
    rate: float
    duration: float
    sent: int = 0
    lagged: int = 0
    achieved: float = 0.0
    drained_after: float | None = None  # seconds from the last enqueue to the last finish
    unfinished: int = 0
    not_succeeded: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)  # final status (or unfinished): jobs
    top_error: str | None = None  # the most frequent error of the attempts that did not succeed
    top_error_attempts: int = 0
    depth: list[tuple[float, int, int]] = field(default_factory=list)  # (t, queued, leased)
    to_start_ms: dict[str, float | None] = field(default_factory=dict)
    to_finish_ms: dict[str, float | None] = field(default_factory=dict)

    def problem(self, settle: float) -> str | None:
        """Why the figures do not measure a healthy run (one line), or None: every job sent
        succeeded."""
        if self.sent and self.outcomes.get("succeeded", 0) == self.sent:
            return None
        if not self.sent:
            return "no job was sent"
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.outcomes.items())
                           if status != "succeeded")
        line = (f"{self.sent - self.outcomes.get('succeeded', 0)} of {self.sent} jobs did not"
                f" succeed ({counts}): the latencies are not those of jobs that worked")
        if self.unfinished:
            line += f"; {self.unfinished} had not finished {settle:g}s after the last enqueue"
        if self.top_error:
            line += f"; most frequent error ({self.top_error_attempts} attempts): {self.top_error}"
        return line


class Bench:
    def __init__(self, settings: Settings, task: str, payload: Any, queue: str, rate: float,
                 duration: float, producers: int, settle: float) -> None:
        if not 0 < rate <= 100_000:
            raise InvalidInput(f"--rate {rate:g} is out of range (0 to 100000 jobs/s)")
        if not 0 < duration <= 86_400:
            raise InvalidInput(f"--duration {duration:g} is out of range (0 to 86400 s)")
        if not 1 <= producers <= 64:
            raise InvalidInput(f"--producers {producers} is out of range (1 to 64)")
        self.settings, self.task, self.payload, self.queue = settings, task, payload, queue
        self.rate, self.duration, self.producers, self.settle = rate, duration, producers, settle
        self.q = for_schema(settings.schema)
        self.ids: list[int] = []
        self._ids_lock = threading.Lock()
        self._stop = threading.Event()

    def run(self) -> Report:
        report = Report(self.rate, self.duration)
        total = max(1, int(self.rate * self.duration))
        clients = [Client(settings=self.settings) for _ in range(self.producers)]
        with Client(settings=self.settings) as observer:
            clients[0].enqueue(self.task, self.payload, queue=self.queue)  # checks task and queue
            for c in clients:
                c._connection()  # connected before the clock starts
            t0 = time.monotonic() + 0.2
            sampler = threading.Thread(target=self._sample, args=(observer, t0, report), daemon=True)
            results: list[tuple[int, int]] = []
            threads = [threading.Thread(target=self._produce, args=(c, t0, total, p, results), daemon=True)
                       for p, c in enumerate(clients)]
            sampler.start()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            ended = time.monotonic()
            for c in clients:
                c.close()
            report.sent = sum(s for s, _ in results)
            report.lagged = sum(lag for _, lag in results)
            report.achieved = report.sent / max(1e-9, ended - t0)
            report.drained_after = self._wait_drained(observer, ended)
            self._stop.set()
            sampler.join(5)
            self._latencies(observer, report)
        return report

    def _produce(self, client: Client, t0: float, total: int, first: int,
                 results: list[tuple[int, int]]) -> None:
        def send() -> None:
            job, _ = client.enqueue(self.task, self.payload, queue=self.queue)
            with self._ids_lock:
                self.ids.append(job.id)
        results.append(open_loop(t0, self.rate, total, first, self.producers, send, self._stop))

    def _sample(self, observer: Client, t0: float, report: Report) -> None:
        k = 0
        while not self._stop.wait(max(0.0, t0 + k - time.monotonic())):
            row = next((r for r in observer.stats() if r.queue == self.queue), None)
            if row is not None:
                report.depth.append((round(time.monotonic() - t0, 1), row.queued, row.leased))
            k += 1

    def _wait_drained(self, observer: Client, ended: float) -> float | None:
        conn = observer._connection()
        deadline = ended + self.settle
        while True:
            left = conn.execute(self.q.bench_unfinished, {"ids": self.ids}).fetchone()["remaining"]
            if left == 0:
                return time.monotonic() - ended
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)

    def _latencies(self, observer: Client, report: Report) -> None:
        rows = observer._connection().execute(self.q.bench_latencies, {"ids": self.ids}).fetchall()
        start = [r["to_start_ms"] for r in rows if r["to_start_ms"] is not None]
        finish = [r["to_finish_ms"] for r in rows if r["to_finish_ms"] is not None]
        report.unfinished = sum(1 for r in rows if r["to_finish_ms"] is None)
        for r in rows:
            status = r["status"] if r["to_finish_ms"] is not None else "unfinished"
            report.outcomes[status] = report.outcomes.get(status, 0) + 1
        top = observer._connection().execute(self.q.bench_top_error, {"ids": self.ids}).fetchone()
        if top is not None:
            report.top_error, report.top_error_attempts = top["error"], top["attempts"]
        report.not_succeeded = sum(1 for r in rows if r["to_finish_ms"] is not None
                                   and r["status"] != "succeeded")
        report.to_start_ms = {f"p{p}": percentile(start, p) for p in PERCENTILES}
        report.to_finish_ms = {f"p{p}": percentile(finish, p) for p in PERCENTILES}
