"""The pure policies (jobrun.policy), tested as properties: backoff, the fate of an attempt,
child recycling and lease deadlines. No I/O, no clock: the random source is injected."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from jobrun.policy import (
    CANCELLED, DEFAULT_RETRY, FAILED, LEASE_EXPIRED, RELEASED, RETRY, SUCCEEDED, TIMEOUT,
    WORKER_LOST, Fate, RetryPolicy, decide, lease_deadline, run_time_average, should_recycle,
)

from tests.profiles import examples

STATUSES = {"succeeded", "queued", "dead", "cancelled"}
OUTCOMES = [SUCCEEDED, FAILED, RETRY, TIMEOUT, WORKER_LOST, LEASE_EXPIRED, CANCELLED, RELEASED]
FAILING = [FAILED, RETRY, TIMEOUT, WORKER_LOST, LEASE_EXPIRED]

# Sane policies: a positive base, a factor of at least 1 (growth), any non-negative cap.
policies = st.builds(RetryPolicy,
                     base=st.floats(0.001, 1e4, allow_nan=False, allow_infinity=False),
                     factor=st.floats(1.0, 16.0, allow_nan=False, allow_infinity=False),
                     cap=st.floats(0.0, 1e7, allow_nan=False, allow_infinity=False))
attempts_st = st.integers(1, 10**6)
huge = st.one_of(st.integers(10**3, 10**7), st.integers(2**62, 2**64),
                 st.integers(10**308, 10**400))
seeds = st.integers(0, 2**32)
delays = st.one_of(st.none(), st.floats(-1e6, 1e7, allow_nan=False, allow_infinity=False))


# --- RetryPolicy ----------------------------------------------------------------------------

@given(policy=policies, a=attempts_st, b=attempts_st)
def test_ceiling_is_monotone_and_capped(policy, a, b):
    lo, hi = sorted((a, b))
    assert 0.0 <= policy.ceiling(lo) <= policy.ceiling(hi) <= policy.cap


@given(policy=policies)
def test_first_ceiling_is_the_base(policy):
    assert policy.ceiling(1) == min(policy.cap, policy.base)


@given(policy=policies, attempt=huge)
def test_huge_attempt_numbers_do_not_overflow(policy, attempt):
    ceiling = policy.ceiling(attempt)
    assert 0.0 <= ceiling <= policy.cap
    if policy.factor >= 1.01 and attempt >= 10**5:
        assert ceiling == policy.cap  # 1.01 ** 100000 is far past any cap (or overflows)
    delay = policy.delay(attempt, random.Random(0))
    assert 0.0 <= delay <= ceiling


def test_default_ladder():
    assert [DEFAULT_RETRY.ceiling(n) for n in range(1, 11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert DEFAULT_RETRY.ceiling(10**9) == 300.0


@given(policy=policies, attempt=attempts_st, seed=seeds)
def test_delay_within_zero_and_ceiling(policy, attempt, seed):
    assert 0.0 <= policy.delay(attempt, random.Random(seed)) <= policy.ceiling(attempt)


@settings(max_examples=examples(50))
@given(attempt=st.integers(1, 12))
def test_delay_is_jittered_over_the_whole_range(attempt):
    rng = random.Random(attempt)
    ceiling = DEFAULT_RETRY.ceiling(attempt)
    draws = [DEFAULT_RETRY.delay(attempt, rng) for _ in range(400)]
    assert min(draws) < 0.1 * ceiling and max(draws) > 0.9 * ceiling  # full jitter, not ±10%


# --- decide ---------------------------------------------------------------------------------

@st.composite
def fate_kwargs(draw, spent: bool | None = None, permanent: bool | None = None):
    """decide()'s keyword arguments; ``spent``: attempts at (or past) max_attempts, or not."""
    max_attempts = draw(st.integers(1, 1000))
    if spent is None:
        attempts = draw(st.integers(0, 2000))
    elif spent:
        attempts = draw(st.integers(max_attempts, 2000))
    else:
        attempts = draw(st.integers(0, max_attempts - 1))
    return dict(attempts=attempts, max_attempts=max_attempts,
                crashes=draw(st.integers(0, 100)), max_crashes=draw(st.integers(1, 100)),
                retry_delay=draw(delays), policy=draw(policies),
                permanent=draw(st.booleans()) if permanent is None else permanent,
                rng=random.Random(draw(seeds)))


@given(kw=fate_kwargs())
def test_succeeded_is_always_succeeded(kw):
    assert decide(SUCCEEDED, **kw) == Fate(SUCCEEDED)


@given(outcome=st.sampled_from(OUTCOMES), kw=fate_kwargs())
def test_fate_is_a_known_status_with_a_sane_delay(outcome, kw):
    fate = decide(outcome, **kw)
    assert fate.status in STATUSES
    assert fate.delay >= 0.0
    if fate.status != "queued":
        assert fate.delay == 0.0


@given(outcome=st.sampled_from(OUTCOMES), kw=fate_kwargs(spent=True))
def test_never_queued_once_attempts_are_spent(outcome, kw):
    # Releases included: every start counts toward the bound.
    assert decide(outcome, **kw).status != "queued"


@given(outcome=st.sampled_from(FAILING), kw=fate_kwargs(spent=True))
def test_spent_attempts_mean_dead(outcome, kw):
    assert decide(outcome, **kw) == Fate("dead")


@given(kw=fate_kwargs())
def test_worker_lost_is_dead_at_max_crashes(kw):
    fate = decide(WORKER_LOST, **kw)
    if kw["crashes"] + 1 >= kw["max_crashes"]:
        assert fate == Fate("dead")  # a poison job stops killing children
    elif not kw["permanent"] and kw["attempts"] < kw["max_attempts"]:
        assert fate.status == "queued"
        assert 0.0 <= fate.delay <= kw["policy"].ceiling(kw["attempts"])


@given(kw=fate_kwargs(spent=False, permanent=False))
def test_retry_delay_is_honoured(kw):
    fate = decide(RETRY, **kw)
    assert fate.status == "queued"
    if kw["retry_delay"] is None:
        assert 0.0 <= fate.delay <= kw["policy"].ceiling(kw["attempts"])
    else:
        assert fate.delay == max(0.0, kw["retry_delay"])


@given(delay=st.floats(-1e9, 0.0, allow_nan=False), kw=fate_kwargs(spent=False, permanent=False))
def test_negative_retry_delay_means_now(delay, kw):
    kw["retry_delay"] = delay
    assert decide(RETRY, **kw) == Fate("queued", 0.0)


@given(outcome=st.sampled_from(FAILING), kw=fate_kwargs(permanent=True))
def test_permanent_is_dead(outcome, kw):
    assert decide(outcome, **kw) == Fate("dead")


@given(outcome=st.sampled_from([FAILED, TIMEOUT, LEASE_EXPIRED]),
       kw=fate_kwargs(spent=False, permanent=False))
def test_failures_back_off_while_attempts_remain(outcome, kw):
    fate = decide(outcome, **kw)
    assert fate.status == "queued"
    assert 0.0 <= fate.delay <= kw["policy"].ceiling(kw["attempts"])


@given(kw=fate_kwargs())
def test_released_goes_back_at_once_until_its_starts_reach_the_bound(kw):
    # The master's shutdown cut it short: back at once, no backoff, while starts remain; the
    # start counts, so a job released at every deploy ends dead at the bound.
    fate = decide(RELEASED, **kw)
    if kw["attempts"] < kw["max_attempts"]:
        assert fate == Fate("queued", 0.0)
    else:
        assert fate == Fate("dead")


@given(kw=fate_kwargs())
def test_cancelled_is_cancelled(kw):
    assert decide(CANCELLED, **kw) == Fate(CANCELLED)


# --- should_recycle -------------------------------------------------------------------------

sizes = st.integers(0, 2**40)


@given(tasks_done=st.integers(0, 10**6), max_tasks=st.integers(0, 10**6), rss=sizes,
       limit=sizes, baseline=sizes)
def test_recycle_rules(tasks_done, max_tasks, rss, limit, baseline):
    why = should_recycle(tasks_done=tasks_done, max_tasks=max_tasks, rss_bytes=rss,
                         max_rss_bytes=limit, baseline_rss_bytes=baseline)
    by_tasks = max_tasks > 0 and tasks_done >= max_tasks
    by_memory = limit > 0 and rss > limit and baseline <= limit
    if by_tasks:
        assert why == "max_tasks"
    elif by_memory:
        assert why == "max_memory"
    else:
        assert why is None


@given(tasks_done=st.integers(0, 10**6), rss=sizes, limit=st.integers(1, 2**40),
       over=st.integers(1, 2**40))
def test_never_recycled_for_memory_when_a_fresh_child_is_over_the_limit(tasks_done, rss, limit, over):
    # Its replacement would start just as large: recycling would churn after every job.
    assert should_recycle(tasks_done=tasks_done, max_tasks=0, rss_bytes=rss, max_rss_bytes=limit,
                          baseline_rss_bytes=limit + over) is None


@given(tasks_done=st.integers(0, 10**6), rss=sizes, baseline=sizes)
def test_no_limits_never_recycle(tasks_done, rss, baseline):
    assert should_recycle(tasks_done=tasks_done, max_tasks=0, rss_bytes=rss, max_rss_bytes=0,
                          baseline_rss_bytes=baseline) is None


# --- lease_deadline -------------------------------------------------------------------------

@given(last=st.floats(0, 1e7, allow_nan=False), ttl=st.floats(0.1, 3600, allow_nan=False),
       later=st.floats(0, 1e4, allow_nan=False))
def test_lease_deadline(last, ttl, later):
    period = ttl / 3
    deadline = lease_deadline(last, ttl, period)
    assert deadline == last + ttl - period
    # Fenced one period before the database lets the lease lapse, never before the renewal.
    assert last < deadline < last + ttl
    # A later renewal never brings the deadline forward.
    assert lease_deadline(last + later, ttl, period) >= deadline


durations = st.floats(0.0, 1e4, allow_nan=False, allow_infinity=False)


@given(previous=durations, sample=durations)
def test_run_time_average_moves_a_fifth_of_the_way_toward_each_sample(previous, sample):
    average = run_time_average(previous, sample)
    assert min(previous, sample) - 1e-9 <= average <= max(previous, sample) + 1e-9
    assert abs((average - previous) - 0.2 * (sample - previous)) <= 1e-9 * max(1.0, previous, sample)


@given(samples=st.lists(durations, min_size=1, max_size=50))
def test_run_time_average_starts_at_the_first_sample_and_stays_within_the_samples(samples):
    average = run_time_average(None, samples[0])
    assert average == samples[0]
    for sample in samples[1:]:
        average = run_time_average(average, sample)
    assert min(samples) - 1e-6 <= average <= max(samples) + 1e-6
