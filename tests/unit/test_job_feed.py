"""The job lines of the events stream (jobrun/web/job_feed.py): each event sent once however
the reads overlap, what a stream holds bounded and its losses counted, and its filter."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobrun.web import job_feed
from jobrun.web.job_feed import JobFilter, Pending, Reader


@given(reads=st.lists(st.lists(st.integers(1, 400), max_size=60), max_size=12))
def test_an_event_is_sent_once_whatever_the_reads_hand_back(reads):
    reader, sent = Reader(), []
    reader.reset(0)
    for batch in reads:
        rows = [{"seq": s} for s in sorted(set(batch))]
        sent += [r["seq"] for r in reader.fresh(rows)]
        assert reader.after() >= reader.floor
    assert len(sent) == len(set(sent))
    assert reader.mark == (max(sent) if sent else 0)


def test_a_read_looks_back_from_its_mark_but_never_before_the_start():
    reader = Reader()
    reader.reset(1000)
    assert reader.after() == 1000  # nothing from before the stream began
    reader.fresh([{"seq": 1500}])
    assert reader.after() == 1500 - job_feed.RECHECK
    assert reader.fresh([{"seq": 1400}, {"seq": 1500}]) == [{"seq": 1400}]  # a late commit


@given(n=st.integers(0, 50), size=st.integers(1, 20))
def test_a_stream_holds_at_most_its_buffer_and_counts_what_it_dropped(n, size):
    pending = Pending(JobFilter(), size)
    for i in range(n):
        pending.offer(str(i))
    held, dropped = pending.take()
    assert held == [str(i) for i in range(max(0, n - size), n)]
    assert dropped == max(0, n - size)
    assert pending.take() == ([], 0)


def test_a_filter_matches_any_listed_value_of_each_field_it_names():
    row = {"job_id": 7, "queue": "emails", "event": "dead"}
    assert JobFilter().matches(row)
    assert JobFilter(jobs=frozenset({7, 8})).matches(row)
    assert not JobFilter(jobs=frozenset({8})).matches(row)
    assert JobFilter(queues=frozenset({"emails"}), events=frozenset({"dead", "cancelled"})).matches(row)
    assert not JobFilter(queues=frozenset({"emails"}), events=frozenset({"succeeded"})).matches(row)
