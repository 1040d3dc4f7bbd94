"""The aging starvation bound, measured on a real master saturated by a steady stream of
priority -100 jobs: with aging on, a priority 100 job starts within the bound of
docs/queues.md (computed from the throughput and depth measured in the run); with aging off,
it does not start while the stream runs."""

from __future__ import annotations

import threading

import jobrun
from jobrun.policy.aging import PRIORITY_MIN, starvation_bound, sweep_interval
from jobrun.testing import wait_for

AGING = 0.02      # seconds per step: 200 steps from 100 to -100 take 4 s
RUN = "0.02"      # each stream job sleeps 20 ms
BUFFER = 40       # the stream keeps at least this many -100 jobs queued
CONCURRENCY = 2


class Stream:
    """Keeps the queue saturated: tops the runnable -100 jobs up to 2 * BUFFER whenever fewer
    than BUFFER wait, from its own thread and connection."""

    def __init__(self, dsn: str, schema: str, queue: str) -> None:
        self.client = jobrun.Client(dsn, schema=schema)
        self.queue = queue
        self.halt = threading.Event()
        self.thin = 0  # times the stream found the queue below BUFFER/4 (a starved stream)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        primed = False
        while not self.halt.is_set():
            queued = self.client.queue_get(self.queue)["queued"]
            if primed and queued < BUFFER // 4:
                self.thin += 1
            primed = True
            if queued < BUFFER:
                self.client.enqueue_many([("sleep", RUN)] * (2 * BUFFER - queued),
                                         queue=self.queue, priority=PRIORITY_MIN)
            self.halt.wait(0.01)  # the stream's own pace (not synchronisation)

    def __enter__(self) -> "Stream":
        self.thread.start()
        wait_for(lambda: self.client.queue_get(self.queue)["queued"] >= BUFFER, timeout=30,
                 message="the stream to fill the queue")
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()
        self.thread.join(timeout=30)
        self.client.close()


def _start(master, client, aging):
    client.queue_add("stream", aging=aging)
    m = master("-Q", "stream", "-c", str(CONCURRENCY), "--prefetch", "1", ready=CONCURRENCY)
    return m


def _started_between(client, pg_dsn, schema, since, until) -> int:
    import psycopg
    from psycopg import sql
    with psycopg.connect(pg_dsn) as conn:
        return conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE started_at > %s AND"
                                    " started_at <= %s").format(sql.Identifier(schema, "jobs")),
                            [since, until]).fetchone()[0]


def test_a_low_priority_job_starts_within_the_bound(master, client, pg_dsn, schema):
    _start(master, client, AGING)
    with Stream(pg_dsn, schema, "stream") as stream:
        wait_for(lambda: client.queue_get("stream")["leased"] > 0, timeout=30,
                 message="the master to run the stream")
        before = client.queue_get("stream")
        job = client.enqueue("noop", queue="stream", priority=100).job
        started = wait_for(lambda: client.get(job.id).started_at, timeout=120,
                           message="the priority 100 job to start")
        thin = stream.thin
    waited = (started - job.run_at).total_seconds()
    throughput = _started_between(client, pg_dsn, schema, job.run_at, started) / waited
    # ahead of it at the top level: at most what was queued or claimed when it was enqueued
    ahead = before["queued"] + before["leased"] + CONCURRENCY
    lag = sweep_interval(AGING) + 0.5  # one sweep interval, plus a statement on a busy machine
    bound = starvation_bound(100, AGING, lag, ahead, throughput)
    print(f"aging bound: waited {waited:.3f}s, bound {bound:.3f}s, {throughput:.1f} jobs/s,"
          f" {ahead} ahead")
    assert thin == 0, "the stream ran dry: the queue was not saturated"
    assert waited >= (100 - PRIORITY_MIN) * AGING * 0.9, waited  # it did wait for aging
    assert waited <= bound, (waited, bound, throughput, ahead)
    assert client.get(job.id).base_priority == 100


def test_without_aging_it_waits_while_the_stream_runs(master, client, pg_dsn, schema):
    _start(master, client, None)
    with Stream(pg_dsn, schema, "stream") as stream:
        wait_for(lambda: client.queue_get("stream")["leased"] > 0, timeout=30,
                 message="the master to run the stream")
        job = client.enqueue("noop", queue="stream", priority=100).job
        # watch it for longer than the bound above gives a job with aging on
        window = (100 - PRIORITY_MIN) * AGING * 2 + 2.0
        try:
            wait_for(lambda: client.get(job.id).started_at, timeout=window, interval=0.1)
            started_early = True
        except TimeoutError:  # expected: it never started
            started_early = False
        thin = stream.thin
    assert thin == 0, "the stream ran dry: the queue was not saturated"
    assert not started_early
    assert client.get(job.id).priority == 100
