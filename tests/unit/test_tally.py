"""The job tally (worker/tally.py) gives /metrics exactly what one inc() and observe() a job
would have given, read by a real Prometheus text parser; and it adds once a loop turn."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobrun.worker.metrics import DURATION_BUCKETS, WAIT_BUCKETS, Metrics
from jobrun.worker.tally import JobTally
from tests.profiles import examples

labels = st.tuples(st.sampled_from(["default", "emails"]), st.sampled_from(["a", "b"]))
runs = st.lists(st.tuples(labels, st.sampled_from(["succeeded", "failed"]),
                          st.one_of(st.sampled_from([0.0, *DURATION_BUCKETS, *WAIT_BUCKETS, 4000.0]),
                                    st.floats(0, 4000, allow_nan=False))), max_size=60)


def samples(metrics: Metrics) -> dict:
    text = generate_latest(metrics.registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("jobrun_jobs", "jobrun_job_duration_seconds", "jobrun_job_wait_seconds"):
            for s in family.samples:
                if not s.name.endswith("_created"):
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@settings(max_examples=examples(100), deadline=None)
@given(runs)
def test_the_tally_exposes_what_one_observe_a_job_would(jobs):
    direct, tallied = Metrics(), Metrics()
    tally = JobTally(tallied)
    for (queue, task), outcome, took in jobs:
        direct.jobs.labels(queue, task, outcome).inc()
        direct.duration.labels(queue, task).observe(took)
        direct.wait.labels(queue).observe(took)
        tally.count(queue, task, outcome)
        tally.duration(queue, task, took)
        tally.wait(queue, took)
    tally.flush()
    got, want = samples(tallied), samples(direct)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert abs(got[key] - value) <= 1e-6 * max(1.0, abs(value)), key


def test_it_adds_once_a_loop_turn():
    metrics = Metrics()
    tally = JobTally(metrics)
    counter = metrics.jobs.labels("default", "a", "succeeded")

    async def main():
        for _ in range(5):
            tally.count("default", "a", "succeeded")
        assert counter._value.get() == 0  # not yet: at the end of this turn
        await asyncio.sleep(0)
        assert counter._value.get() == 5

    asyncio.run(main())
