"""The Python remote worker's own rules, in-process (jobrun.remote.worker): text made
storable, report batches bounded by count and size, a refused batch resent one by one,
outcomes in flight not sent twice at once, the backoff between failed tries bounded."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, strategies as st

import jobrun
from jobrun.errors import InvalidInput
from jobrun.remote.worker import BATCH, PAUSE_MAX, Options, RemoteWorker, _storable

pytestmark = pytest.mark.unit


@given(st.text())
def test_storable_text_has_no_nul_and_encodes(text):
    clean = _storable(text)
    assert "\x00" not in clean
    clean.encode("utf-8")  # no lone surrogate left
    if "\x00" not in text and all(not 0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert clean == text


def worker(slots=4, **kw):
    app = jobrun.App()

    @app.task("t", queue="q")
    def t(job):
        return None

    w = RemoteWorker(app, Options(url="http://127.0.0.1:1", token="x", slots=slots, **kw))
    w.max_body = 10_000
    return w


def test_credits_are_twice_the_slots_and_queues_come_from_the_tasks():
    w = worker(slots=3)
    assert (w.credits, w.queues) == (6, ["q"])
    assert worker(queues=("a", "b")).queues == ["a", "b"]
    with pytest.raises(InvalidInput):
        worker(slots=0)
    with pytest.raises(InvalidInput):
        worker(queues=("bad name",))


def test_batches_are_bounded_by_count_and_size():
    w = worker()
    w.max_body = 1024 * 1024
    w.outbox = [{"id": i, "token": 1, "outcome": "succeeded", "result": None}
                for i in range(BATCH + 50)]
    assert len(w._batch()) == BATCH
    w.max_body = 10_000
    w.outbox = [{"id": i, "token": 1, "outcome": "succeeded", "result": "x" * 2000}
                for i in range(10)]
    batch = w._batch()
    assert 1 <= len(batch) < 10
    assert sum(len(o["result"]) for o in batch) <= w.max_body // 2
    w.outbox = [{"id": i, "token": 1, "outcome": "failed", "traceback": "t" * 3000}
                for i in range(10)]
    assert len(w._batch()) == 1  # tracebacks count too
    w.outbox = [{"id": 1, "token": 1, "outcome": "succeeded", "result": "x" * 50_000}]
    assert len(w._batch()) == 1  # one too large still goes (the server says 413 if so)


def test_a_refused_batch_is_resent_one_by_one():
    w = worker()
    w.outbox = [{"id": i, "token": 1, "outcome": "failed"} for i in range(3)]
    w._singly = 3
    assert [len(w._batch()) for _ in range(3)] == [1, 1, 1]
    assert len(w._batch()) == 3  # then batches again


def test_outcomes_in_flight_are_not_batched_again():
    w = worker()
    w.outbox = [{"id": i, "token": 1, "outcome": "succeeded"} for i in range(4)]
    w.sending = {0, 2, 99}  # 99: dropped from the outbox meanwhile (its lease was lost)
    assert [o["id"] for o in w._batch()] == [1, 3]
    w.sending = {0, 1, 2, 3}
    assert w._batch() == []


def test_the_backoff_is_bounded_and_only_a_stop_ends_it_early():
    async def scenario():
        w = worker()
        w._changed, w._halt = asyncio.Event(), asyncio.Event()
        w._changed.set()  # jobs ending: not a reason to ask a server that is down again
        began = time.monotonic()
        await w._pause(1)  # 0.4 s
        assert time.monotonic() - began >= 0.35
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, w.handle_term)
        began = time.monotonic()
        await w._pause(10**6)  # a long run of failures: PAUSE_MAX, not an overflow
        assert time.monotonic() - began < PAUSE_MAX

    asyncio.run(scenario())
