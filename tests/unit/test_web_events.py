"""The events stream's coalescing: one read per interval however many pages listen, unchanged
frames not sent, a slow reader handed only the newest frame."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("starlette")

from jobrun.errors import DatabaseUnavailable
from jobrun.web.events import MIN_INTERVAL, Summaries


def _frame(depth: int, at: str = "t") -> dict:
    return {"at": at, "queues": [{"queue": "default", "queued": depth, "oldest_age": 1.5}],
            "masters": [], "stale_masters": 0, "failures": [], "inflight": []}


async def _next(stream) -> tuple[str, dict]:
    text = await asyncio.wait_for(anext(stream), 5)
    kind, data = text.strip().split("\n")
    return kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))


def test_the_interval_is_never_below_the_floor():
    assert Summaries(lambda: {}, interval=0.001).interval == MIN_INTERVAL


def test_streams_share_one_reader_and_skip_frames_that_only_moved_the_clock():
    async def main():
        reads = []
        depths = iter([1, 1, 1, 2] + [2] * 1000)

        def fetch():
            reads.append(1)
            return _frame(next(depths), at=f"t{len(reads)}")

        s = Summaries(fetch, interval=MIN_INTERVAL)
        a, b = s.stream(), s.stream()
        kind, data = await _next(a)
        assert kind == "snapshot" and data["queues"][0]["queued"] == 1
        kind_b, data_b = await _next(b)
        assert kind_b == "snapshot" and data_b["seq"] == data["seq"]
        kind, data = await _next(a)  # frames 2 and 3 differed only in `at`: not sent
        assert kind == "summary" and data["queues"][0]["queued"] == 2 and data["seq"] == 2
        assert len(reads) == s.frames >= 4
        await a.aclose()
        await b.aclose()
        await s.close()
    asyncio.run(main())


def test_a_slow_reader_gets_only_the_newest_frame():
    async def main():
        n = iter(range(1, 10_000))
        s = Summaries(lambda: _frame(next(n)), interval=MIN_INTERVAL)
        stream = s.stream()
        _, first = await _next(stream)
        while s.frames < first["seq"] + 3:  # the reader lags three frames behind
            await asyncio.sleep(MIN_INTERVAL / 5)
        _, data = await _next(stream)
        assert data["seq"] >= first["seq"] + 3  # skipped to the newest, nothing queued up
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

        s = Summaries(fetch, interval=MIN_INTERVAL)
        stream = s.stream()
        kind, data = await _next(stream)
        assert kind == "error" and "cannot reach PostgreSQL" in data["error"]
        kind, data = await _next(stream)
        assert kind == "summary" and data["queues"][0]["queued"] == 3
        await stream.aclose()
        await s.close()
    asyncio.run(main())
