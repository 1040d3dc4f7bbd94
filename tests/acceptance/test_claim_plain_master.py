"""A master serving one queue without -Q limits claims with claim_plain, and falls back to
claim_jobs when the queue gets a limit while it runs: the limit holds at every sampled instant,
and when it is cleared the queue runs in parallel again. (Keyed jobs on such masters:
tests/acceptance/test_limits_masters.py::test_one_running_job_per_concurrency_key, whose
masters serve the default queue alone.)"""

from __future__ import annotations

import pytest

from jobrun.testing import wait_for
from tests.dbview import Db, enqueue

pytestmark = pytest.mark.acceptance

Q = "solo"


def sample_until_done(db: Db, ids: list[int], timeout: float = 60.0) -> list[tuple[int, int]]:
    """(leased, leased and not counted) in the queue, again and again until ``ids`` are done."""
    samples: list[tuple[int, int]] = []

    def finished() -> bool:
        row = db.rows("SELECT count(*) AS n, count(*) FILTER (WHERE NOT counted) AS plain"
                      " FROM {s}.jobs WHERE status = 'leased' AND queue = %s", (Q,))[0]
        samples.append((row["n"], row["plain"]))
        return all(s == "succeeded" for s in db.statuses(ids).values())

    wait_for(finished, timeout=timeout, interval=0.005, message="the jobs to finish")
    return samples


def test_a_limit_set_while_a_single_queue_master_runs_holds_and_lifts(master, client, db):
    client.queue_add(Q)
    master("-c", "4", "--prefetch", "1", "-Q", Q).wait_ready(4)
    leased = lambda where="true": db.count(  # noqa: E731
        f"status = 'leased' AND queue = '{Q}' AND " + where)

    # No limit: four at a time, none of them counted.
    first = enqueue(client, [("sleep", 0.2)] * 16, queue=Q)
    wait_for(lambda: leased() >= 2, timeout=20, interval=0.005, message="jobs in parallel")
    assert leased("counted") == 0

    # concurrency 1 mid-load. Leases taken before it are not counted (docs/dispatch.md): once
    # they are done, at most one runs, and every lease is the fallback's (counted).
    client.queue_update(Q, concurrency=1)
    wait_for(lambda: leased("NOT counted") == 0, timeout=20, interval=0.005,
             message="the leases from before the limit to end")
    remaining = [i for i, s in db.statuses(first).items() if s != "succeeded"]
    assert len(remaining) >= 6, remaining  # over a second of serial work: PLAIN_RETRY passes
    samples = sample_until_done(db, first)
    assert len(samples) >= 100, len(samples)
    assert max(n for n, _ in samples) == 1, samples  # reached, never exceeded
    assert max(p for _, p in samples) == 0, samples  # no lease without the limit's count
    assert db.count("id = ANY(%s) AND counted", (remaining,)) == len(remaining)

    # The limit cleared: parallel again, uncounted, every job done once.
    client.queue_update(Q, concurrency=None)
    second = enqueue(client, [("sleep", 0.2)] * 16, queue=Q)
    samples = sample_until_done(db, second)
    assert max(n for n, _ in samples) >= 2, samples
    assert db.count(f"queue = '{Q}' AND id = ANY(%s) AND counted", (second,)) == 0
    assert db.count(f"queue = '{Q}' AND status = 'succeeded' AND attempts = 1") == 32
    assert db.rows("SELECT count(*) AS n FROM {s}.job_attempts")[0]["n"] == 32
