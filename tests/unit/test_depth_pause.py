"""The queue-depth count's pacing: all live masters together spend at most a tenth of the time."""

from __future__ import annotations

from hypothesis import given, strategies as st

from jobrun.worker.registry import depth_pause

intervals = st.floats(min_value=0.1, max_value=60.0)
tooks = st.floats(min_value=0.0, max_value=30.0)
masters = st.integers(min_value=0, max_value=500)


@given(intervals, tooks, masters)
def test_never_sooner_than_the_refresh_interval(interval, took, n):
    assert depth_pause(interval, took, n) >= interval


@given(intervals, tooks, masters)
def test_the_cluster_counts_at_most_a_tenth_of_the_time(interval, took, n):
    # n masters each count for `took` once per pause: their share of one master's time.
    assert max(1, n) * took / depth_pause(interval, took, n) <= 0.1 + 1e-9


@given(intervals, st.floats(min_value=0.001, max_value=30.0), st.integers(min_value=1, max_value=499))
def test_more_masters_count_less_often_each(interval, took, n):
    assert depth_pause(interval, took, n + 1) >= depth_pause(interval, took, n)
