"""The events stream's coalescing: one read per interval however many pages listen, unchanged
frames not sent, a slow reader handed only the newest frame."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from hypothesis import given, strategies as st

pytest.importorskip("starlette")

from jobrun.errors import DatabaseUnavailable
from jobrun.web.events import IDLE_INTERVAL, MAX_INTERVAL, MIN_INTERVAL, Summaries
from jobrun.web.summary import percentiles


def _frame(depth: int, at: str = "t") -> dict:
    return {"at": at, "queues": [{"queue": "default", "queued": depth, "oldest_age": 1.5}],
            "masters": [], "stale_masters": 0, "failures": [], "inflight": []}


async def _next(stream) -> tuple[str, dict]:
    text = await asyncio.wait_for(anext(stream), 5)
    kind, data = text.strip().split("\n")
    return kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))


class Pacer:
    """The poller's sleep, driven by the test: each pause is recorded and lasts until the test
    lets the poller go on, so a test steps through reads instead of waiting out the intervals."""

    def __init__(self) -> None:
        self.pauses: list[float] = []  # one after each read
        self._changed = asyncio.Condition()
        self._go = asyncio.Semaphore(0)
        self._let_go = 0  # pauses ended by the test: the poller reads once more than this

    async def sleep(self, seconds: float) -> None:
        async with self._changed:
            self.pauses.append(seconds)
            self._changed.notify_all()
        await self._go.acquire()

    async def paused(self, reads: int) -> None:
        """Return once the poller paused after its ``reads``-th read."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.pauses) >= reads), 5)

    async def step(self, reads: int = 1) -> None:
        """Let the poller make ``reads`` more reads, and return once it paused after the last."""
        self._let_go += reads
        for _ in range(reads):
            self._go.release()
        await self.paused(self._let_go + 1)


def test_the_interval_is_never_below_the_floor():
    assert Summaries(lambda: {}, interval=0.001).interval == MIN_INTERVAL


def test_streams_share_one_reader_and_skip_frames_that_only_moved_the_clock():
    async def main():
        reads = []
        depths = iter([1, 1, 1, 2] + [2] * 1000)

        def fetch():
            reads.append(1)
            return _frame(next(depths), at=f"t{len(reads)}")

        pacer = Pacer()
        s = Summaries(fetch, interval=MIN_INTERVAL, cost_factor=0, sleep=pacer.sleep)
        a, b = s.stream(), s.stream()
        kind, data = await _next(a)
        assert kind == "snapshot" and data["queues"][0]["queued"] == 1
        await pacer.paused(1)
        kind_b, data_b = await _next(b)
        assert kind_b == "snapshot" and data_b["seq"] == data["seq"]
        await pacer.step(3)
        kind, data = await _next(a)  # frames 2 and 3 differed only in `at`: not sent
        assert kind == "summary" and data["queues"][0]["queued"] == 2 and data["seq"] == 2
        assert len(reads) == s.frames == 4
        # Busy after a change, idle after a frame that only moved the clock.
        assert pacer.pauses == [MIN_INTERVAL, IDLE_INTERVAL, IDLE_INTERVAL, MIN_INTERVAL]
        await a.aclose()
        await b.aclose()
        await s.close()
    asyncio.run(main())


def test_a_slow_reader_gets_only_the_newest_frame():
    async def main():
        n = iter(range(1, 10_000))
        pacer = Pacer()
        s = Summaries(lambda: _frame(next(n)), interval=MIN_INTERVAL, sleep=pacer.sleep)
        stream = s.stream()
        _, first = await _next(stream)
        await pacer.step(3)  # the reader lags three frames behind
        assert s.frames == first["seq"] + 3
        _, data = await _next(stream)
        assert data["seq"] == first["seq"] + 3  # skipped to the newest, nothing queued up
        await stream.aclose()
        await s.close()
    asyncio.run(main())


def test_a_database_error_is_an_error_event_and_frames_resume_after_it():
    async def main():
        results = iter([DatabaseUnavailable("cannot reach PostgreSQL"), _frame(3)] + [_frame(3)] * 1000)

        def fetch():
            r = next(results)
            if isinstance(r, Exception):
                raise r
            return r

        pacer = Pacer()
        s = Summaries(fetch, interval=MIN_INTERVAL, sleep=pacer.sleep)
        stream = s.stream()
        kind, data = await _next(stream)
        assert kind == "error" and "cannot reach PostgreSQL" in data["error"]
        await pacer.step()
        kind, data = await _next(stream)
        assert kind == "summary" and data["queues"][0]["queued"] == 3
        await stream.aclose()
        await s.close()
    asyncio.run(main())


def test_the_pace_is_busy_idle_or_stretched_by_the_read_s_cost():
    s = Summaries(lambda: {}, interval=MIN_INTERVAL, idle_interval=1.0, cost_factor=20)
    s.last_cost = 0.001
    assert s.pause_after(changed=True) == MIN_INTERVAL  # at most one summary per 250 ms
    assert s.pause_after(changed=False) == 1.0
    s.last_cost = 0.05  # a 50 ms read waits a second whatever happened
    assert s.pause_after(changed=True) == pytest.approx(1.0)
    s.last_cost = 10.0
    assert s.pause_after(changed=True) == MAX_INTERVAL


def test_the_poller_measures_each_read_and_slows_after_a_slow_one():
    async def main():
        def fetch():
            time.sleep(0.03)  # stands in for a slow database read
            return _frame(1)

        s = Summaries(fetch, interval=MIN_INTERVAL, cost_factor=20)
        stream = s.stream()
        await _next(stream)
        assert s.last_cost >= 0.03 and s.pause_after(True) >= 0.6
        await stream.aclose()
        await s.close()
    asyncio.run(main())


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200))
def test_percentiles_interpolate_between_closest_ranks(values):
    p50, p95 = percentiles(values)
    ordered = sorted(values)

    def cont(p):  # PostgreSQL's percentile_cont
        rank = p * (len(ordered) - 1)
        low = int(rank)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

    assert p50 == pytest.approx(cont(0.5)) and p95 == pytest.approx(cont(0.95))
    assert p50 <= p95 or p50 == pytest.approx(p95)
