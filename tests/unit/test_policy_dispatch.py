"""jobrun.policy.dispatch: -Q syntax, queue orders, a master's room, the sliding rate window."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from jobrun.errors import InvalidInput
from jobrun.policy import dispatch

from tests.profiles import examples

pytestmark = pytest.mark.unit

jobs = st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 5)), max_size=8)


def queues_of(lists):
    """Per queue, candidates (priority, run_at, id) in index order, ids unique."""
    out, next_id = [], 1
    for items in lists:
        rows = []
        for priority, run_at in sorted(items):
            rows.append((priority, run_at, next_id))
            next_id += 1
        out.append(rows)
    return out


def test_queue_syntax():
    assert dispatch.parse_queues("emails=4, default") == (("emails", 4), ("default", None))
    assert dispatch.parse_queues(["a", "b=1"]) == (("a", None), ("b", 1))
    for bad, says in (("emails=0", "invalid limit '0'"), ("emails=x", "invalid limit 'x'"),
                      ("emails=", "invalid limit ''"), ("a,a=2", "named twice"),
                      ("", "at least one queue"), ("bad name", "invalid queue name")):
        with pytest.raises(InvalidInput, match=says) as err:
            dispatch.parse_queues(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(InvalidInput, match="one of global, priority, round_robin"):
        dispatch.check_order("fair")


@given(st.lists(jobs, min_size=1, max_size=4), st.integers(0, 20), st.integers(0, 7))
def test_round_robin_prefixes_are_fair(lists, limit, turn):
    """In what a round_robin claim takes, two queues that both still had jobs differ by at
    most one; every queue with jobs gets some while the limit allows one each."""
    cands = queues_of(lists)
    taken = dispatch.merge("round_robin", cands, [limit] * len(cands), limit, turn)
    counts = [sum(1 for i, _ in taken if i == q) for q in range(len(cands))]
    for a in range(len(cands)):
        for b in range(len(cands)):
            if counts[a] < len(cands[a]):  # a was not exhausted: b got at most one more
                assert counts[b] <= counts[a] + 1
    nonempty = [q for q in range(len(cands)) if cands[q]]
    if limit >= len(nonempty):
        assert all(counts[q] >= 1 for q in nonempty)
    assert len(taken) == min(limit, sum(len(c) for c in cands))


@given(st.lists(jobs, min_size=1, max_size=4), st.integers(0, 20))
def test_priority_order_takes_earlier_queues_first(lists, limit):
    cands = queues_of(lists)
    taken = dispatch.merge("priority", cands, [limit] * len(cands), limit, 0)
    order = [i for i, _ in taken]
    assert order == sorted(order)
    # A later queue appears only once every earlier queue is exhausted.
    for q in set(order):
        for earlier in range(q):
            assert order.count(earlier) == len(cands[earlier])


@given(st.lists(jobs, min_size=1, max_size=4), st.integers(0, 20))
def test_global_order_is_one_priority_order(lists, limit):
    cands = queues_of(lists)
    taken = dispatch.merge("global", cands, [limit] * len(cands), limit, 3)
    by_id = {row[2]: row for rows in cands for row in rows}
    keys = [by_id[j] for _, j in taken]
    assert keys == sorted(keys)
    everything = sorted(by_id.values())
    assert keys == everything[:len(keys)]  # the best jobs overall, whatever their queue


@given(st.lists(jobs, min_size=1, max_size=4), st.lists(st.integers(0, 5), min_size=4, max_size=4),
       st.integers(0, 20), st.sampled_from(dispatch.ORDERS), st.integers(0, 5))
def test_no_queue_gets_more_than_allowed(lists, allowed, limit, order, turn):
    cands = queues_of(lists)
    allowed = allowed[:len(cands)]
    taken = dispatch.merge(order, cands, allowed, limit, turn)
    for q in range(len(cands)):
        mine = [j for i, j in taken if i == q]
        assert len(mine) <= allowed[q]
        assert mine == [row[2] for row in cands[q][:len(mine)]] or order == "global"
    assert len(taken) <= limit


@given(st.dictionaries(st.sampled_from("abc"), st.integers(1, 5)),
       st.dictionaries(st.sampled_from("abc"), st.integers(0, 8)))
def test_rooms(limits, held):
    rooms = dispatch.rooms(["a", "b", "c"], limits, held)
    for q, room in zip("abc", rooms):
        if q in limits:
            assert room == max(0, limits[q] - held.get(q, 0))
        else:
            assert room is None


@settings(max_examples=examples(400))
@given(st.lists(st.tuples(st.floats(0, 20, allow_nan=False), st.integers(1, 6)), max_size=40),
       st.floats(0.05, 5, allow_nan=False), st.integers(1, 10))
def test_rate_window_holds_for_every_window(claims, period, limit):
    """Claims arrive in any order of their clocks (a claim that began earlier may take the
    lock later); each takes what rate_room allows and records it with rate_record, as the
    claim statement does. No half-open window [t, t + period) of the true start times ever
    holds more than the limit."""
    window: list[tuple[float, int]] = []
    last = float("-inf")
    starts: list[tuple[float, int]] = []
    for at, wanted in claims:
        room, retry = dispatch.rate_room(window, at, period, limit, last)
        assert retry >= 0
        took = min(room, wanted)
        if took:
            starts.append((at, took))
            window = dispatch.rate_record(window, at, period, took)
            last = max(last, at)
    for start, _ in starts:
        inside = sum(n for at, n in starts if start <= at < start + period)
        assert inside <= limit
    assert len(window) <= 2 * dispatch.BUCKETS + 2


def test_rate_window_says_when_a_start_comes_back():
    assert dispatch.rate_room([(10.0, 3), (10.5, 2)], 10.9, 1.0, 5) == (0, pytest.approx(0.1))
    assert dispatch.rate_room([(10.0, 3), (10.5, 2)], 11.0, 1.0, 5) == (3, pytest.approx(0.5))
    assert dispatch.rate_room([], 3.0, 2.0, 4) == (4, 2.0)
    assert dispatch.rate_room([], 3.0, 2.0, 4, last=4.5)[0] == 0  # a clock far behind
    assert dispatch.rate_bucket(10.001, 1.0) == pytest.approx(10.02)
