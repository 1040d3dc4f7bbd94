"""The master's policies as properties: prefetch sizing, attempt overrides, the crash cap,
what a boot-error exit means, early deaths, and the intervals derived from the lease TTL."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobrun.policy import (
    DEFAULT_MAX_CRASHES, MAX_EARLY_DEATHS, BootFailure, RetryPolicy, alive_interval, boot_failure,
    database_reached, heartbeat_period, max_attempts_for, max_crashes_for, reap_interval,
    retry_policies, retry_wait, start_failing, tick_interval,
)
from jobrun.policy import prefetch
from jobrun.policy.retry import Outcome, limit_to_record
from jobrun.states import Status

small = st.integers(0, 64)
secs = st.floats(1e-6, 10.0, allow_nan=False)
runtimes = st.dictionaries(st.sampled_from("abcdef"), secs, max_size=6)
busy_st = st.lists(st.tuples(st.integers(0, 16), st.one_of(st.none(), secs), st.booleans()),
                   max_size=8)


@given(p=st.integers(1, 64), max_tasks=small, done=small)
def test_cap_never_exceeds_the_prefetch_or_the_tasks_left(p, max_tasks, done):
    limit = prefetch.cap(p, max_tasks, done)
    assert limit <= p
    if max_tasks:
        assert limit <= max_tasks - done
    else:
        assert limit == p


@given(tasks=st.lists(st.sampled_from("abcdefg"), max_size=8), runtime=runtimes, budget=secs)
def test_backlog_is_none_when_any_task_is_unknown_or_long(tasks, runtime, budget):
    held = prefetch.backlog(tasks, runtime, budget)
    if any(t not in runtime or runtime[t] >= budget for t in tasks):
        assert held is None
    else:
        assert held == sum(runtime[t] for t in tasks)


@given(held=small, limit=small, work=st.one_of(st.none(), secs), budget=secs)
def test_headroom_is_what_is_left_of_the_budget_below_the_cap(held, limit, work, budget):
    left = prefetch.headroom(held, limit, work, budget)
    if held >= limit or work is None or work >= budget:
        assert left is None
    else:
        assert 0 < left <= budget and left == budget - work


@given(p=st.integers(1, 64), budget=secs, runtime=runtimes,
       idle=st.lists(st.integers(1, 64), max_size=16), target=st.integers(1, 64), busy=busy_st)
def test_room_is_bounded_by_what_children_can_hold(p, budget, runtime, idle, target, busy):
    """``idle`` holds each idle child's cap (--max-tasks-per-child can make it less than the
    prefetch depth): no idle child is counted for more than it may hold behind its first job."""
    extra, most, dry_soon = prefetch.room(prefetch=p, budget=budget, runtime=runtime, idle=idle,
                                          target=target, busy=busy)
    assert extra >= 0 and most >= 0
    if p <= 1 or not runtime or max(runtime.values()) >= budget:
        assert (extra, most, dry_soon) == (0, 0, False)
        return
    assert extra <= (sum(min(p, cap) - 1 for cap in idle)
                     + sum(max(1, free) for free, left, _ in busy if left is not None))
    assert most <= target * (p - 1)
    assert dry_soon == any(left is not None and not queued for _, left, queued in busy)


@given(budget=secs, runtime=runtimes, idle=st.integers(0, 16), target=st.integers(1, 64))
def test_children_that_run_one_job_each_are_claimed_one_job_each(budget, runtime, idle, target):
    """--max-tasks-per-child 1: an idle child may hold its one job only, so nothing is claimed
    beyond one job per idle child (rows claimed beyond it were given back, every time)."""
    extra, _, _ = prefetch.room(prefetch=128, budget=budget, runtime=runtime,
                                idle=[prefetch.cap(128, 1, 0)] * idle, target=target, busy=[])
    assert extra == 0


@given(idle=small, extra=small, most=small, dry=st.booleans())
def test_worth_claiming(idle, extra, most, dry):
    worth = prefetch.worth_claiming(idle, extra, most, dry)
    if idle:
        assert worth
    elif extra == 0:
        assert not worth
    else:
        assert worth == (dry or extra >= most * 3 // 4)


@given(idle=small, extra=small, most=small, dry=st.booleans())
def test_a_claim_is_reconsidered_at_the_first_result_that_can_make_it_worth_it(idle, extra,
                                                                              most, dry):
    """Busy children that run on to a job they held free a slot each (extra + 1) and stay
    busy (idle and dry_soon unchanged): the count is the first result after which the
    decision can flip, no earlier (wasted looks) and no later (a claim delayed)."""
    n = prefetch.results_to_reconsider(idle, extra, most, dry)
    worth = prefetch.worth_claiming(idle, extra, most, dry)
    assert (n == 0) == worth
    if not worth:
        assert not any(prefetch.worth_claiming(idle, extra + k, most, dry) for k in range(1, n))
        assert prefetch.worth_claiming(idle, extra + n, most, dry)


@given(backlogged=st.booleans(), ahead=st.booleans())
def test_completions_linger_only_with_a_backlog_and_longest_when_every_child_holds_more(
        backlogged, ahead):
    linger = prefetch.complete_linger(backlogged, ahead)
    if not backlogged:
        assert linger == 0
    else:
        # Short of a lease's renewal period by far: lingering never costs a lease.
        assert 0 < prefetch.complete_linger(True, False) <= linger <= 0.1
        assert (linger > prefetch.complete_linger(True, False)) == ahead


@given(enqueued=st.integers(1, 1000), task=st.one_of(st.none(), st.integers(1, 1000)))
def test_a_task_max_attempts_caps_but_never_raises(enqueued, task):
    got = max_attempts_for(enqueued, task)
    assert got <= enqueued
    assert got == (min(enqueued, task) if task else enqueued)


@given(enqueued=st.integers(1, 1000), task=st.one_of(st.none(), st.integers(1, 1000)),
       outcome=st.sampled_from([v for k, v in vars(Outcome).items() if k.isupper()]),
       status=st.sampled_from([Status.QUEUED, Status.DEAD, Status.SUCCEEDED, Status.CANCELLED]))
def test_the_limit_recorded_is_the_lower_task_limit_of_a_failed_attempt(enqueued, task,
                                                                        outcome, status):
    """What a job shows as its max_attempts after an attempt: the task's limit once it applied
    to a failure (a retry or death it decided), never a raise, nothing for other outcomes."""
    got = limit_to_record(enqueued, task, outcome, status)
    failed = outcome not in (Outcome.SUCCEEDED, Outcome.CANCELLED, Outcome.RELEASED)
    lower = task is not None and task < enqueued
    if failed and lower and status in (Status.QUEUED, Status.DEAD):
        assert got == task == max_attempts_for(enqueued, task)
    else:
        assert got is None


@given(st.one_of(st.none(), st.integers(0, 100)))
def test_crash_cap_is_the_tasks_own_else_the_default(value):
    cfg = {} if value is None else {"max_crashes": value}
    assert max_crashes_for(cfg) == (DEFAULT_MAX_CRASHES if value is None else value)


def test_retry_policies_are_the_declared_ones():
    got = retry_policies({"a": {"retry": [2.0, 3.0, 60.0]}, "b": {}})
    assert got == {"a": RetryPolicy(2.0, 3.0, 60.0)}


@given(was_ready=st.booleans(), booted=st.booleans(), newer=st.booleans())
def test_boot_failure(was_ready, booted, newer):
    got = boot_failure(was_ready=was_ready, booted=booted, newer_than_serving=newer)
    if was_ready:
        assert got is BootFailure.NONE  # a handler's os._exit(3) is a crash, not a boot error
    elif not booted:
        assert got is BootFailure.STOP
    else:
        assert got is (BootFailure.RELOAD_FAILED if newer else BootFailure.EARLY_DEATH)


@given(st.integers(0, 100))
def test_start_failing_at_the_limit(deaths):
    assert start_failing(deaths) == (deaths >= MAX_EARLY_DEATHS)


@given(ttl=st.floats(0.3, 86400.0, allow_nan=False))
def test_intervals_fit_inside_one_heartbeat_period(ttl):
    period = heartbeat_period(ttl)
    assert period == ttl / 3
    assert alive_interval(ttl) <= max(0.05, period / 3 + 1e-9)
    assert 0.01 <= tick_interval(ttl) <= 0.25
    assert 0.5 <= reap_interval(ttl) <= 5.0


@given(since=st.floats(0, 1000, allow_nan=False), poll=st.floats(0.01, 100, allow_nan=False))
def test_database_reached(since, poll):
    assert database_reached(since, poll) == (since < max(10.0, 5 * poll))


@given(period=st.floats(0.05, 60), now=st.floats(0, 1e6), left=st.floats(-10, 120))
def test_a_retry_after_a_failed_renewal_waits_at_most_a_period_and_lands_before_the_deadline(
        period, now, left):
    wait = retry_wait(period, now, now + left)
    assert 0.05 <= wait <= max(0.05, period)
    if left > 0.1:
        assert now + wait < now + left  # the next try comes while the lease can still be renewed
