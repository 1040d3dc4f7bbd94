"""Queue settings as text and values (jobrun.validate.rate, jobrun.queue_rules) and the aging
policy (jobrun.policy.aging), as properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobrun import queue_rules, validate
from jobrun.errors import InvalidInput
from jobrun.policy import aging

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


# --- rates --------------------------------------------------------------------------------

@given(count=st.integers(1, 10**6), n=st.integers(1, 500), unit=st.sampled_from(sorted(UNITS)),
       bare=st.booleans(), spaces=st.booleans())
def test_rate_round_trips(count, n, unit, bare, spaces):
    period = UNITS[unit] * (1 if bare else n)
    if period > validate.MAX_RATE_PERIOD:
        with pytest.raises(InvalidInput, match="invalid rate"):
            validate.rate(f"{count}/{'' if bare else n}{unit}")
        return
    gap = " " if spaces else ""
    text = f"{count}{gap}/{gap}{'' if bare else n}{unit}"
    got = validate.rate(text)
    assert got[0] == count and math.isclose(got[1], period)


def test_rate_examples():
    assert validate.rate("50/s") == (50, 1.0)
    assert validate.rate("1000/m") == (1000, 60.0)
    assert validate.rate("10/h") == (10, 3600.0)
    assert validate.rate("5/2s") == (5, 2.0)
    assert validate.rate("3/250ms") == (3, 0.25)


@pytest.mark.parametrize("text", ["", "50", "/s", "0/s", "-1/s", "5/2", "5/0s", "5/2d", "5/x",
                                  "five/s", "5/s/s", "1.5/s", "5/.5s", None, 5, (5, "s")])
def test_bad_rates_are_one_line_errors(text):
    with pytest.raises(InvalidInput) as err:
        validate.rate(text)
    assert "\n" not in str(err.value) and str(err.value).startswith("invalid rate")


@given(st.text(max_size=12))
def test_rate_accepts_or_refuses_any_text_cleanly(text):
    try:
        count, period = validate.rate(text)
    except InvalidInput as exc:
        assert "\n" not in str(exc)
        return
    assert count >= 1 and 0 < period <= validate.MAX_RATE_PERIOD


# --- settings -----------------------------------------------------------------------------

def test_check_normalises_every_setting():
    got = queue_rules.check({"concurrency": 4, "rate": "50/s", "aging": "30s",
                             "priority_default": -5, "max_attempts": 3, "retention": "2d",
                             "key_concurrency": 2})
    assert got == {"concurrency": 4, "rate": (50, 1.0), "aging": 30.0, "priority_default": -5,
                   "max_attempts": 3, "retention": 172800.0, "key_concurrency": 2}
    assert queue_rules.check({"aging": None, "rate": None}) == {"aging": None, "rate": None}
    assert queue_rules.check({"rate": (5, 2)}) == {"rate": (5, 2.0)}


@pytest.mark.parametrize("changes, message", [
    ({"concurrency": 0}, "invalid concurrency 0"),
    ({"concurrency": True}, "invalid concurrency True"),
    ({"aging": "0s"}, "invalid aging '0s': from 0.001s"),
    ({"aging": "400d"}, "invalid aging '400d'"),
    ({"aging": "soon"}, "invalid aging 'soon': a duration"),
    ({"retention": "0s"}, "invalid retention"),
    ({"priority_default": 101}, "invalid priority 101"),
    ({"priority_default": None}, "priority_default cannot be unset"),
    ({"key_concurrency": None}, "key_concurrency cannot be unset"),
    ({"max_attempts": 0}, "invalid max_attempts 0"),
    ({"rate": "5/0s"}, "invalid rate"),
    ({"rate": (5, 0)}, "invalid rate period 0"),
    ({"rate": "2000000/s"}, "at most 1000000 per period"),
    ({"colour": 1}, "unknown queue setting 'colour'"),
])
def test_check_refuses_bad_values_in_one_line(changes, message):
    with pytest.raises(InvalidInput) as err:
        queue_rules.check(changes)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_from_text_reads_command_line_values():
    assert queue_rules.from_text("concurrency", "none") is None
    assert queue_rules.from_text("concurrency", " 8 ") == 8
    assert queue_rules.from_text("aging", "5m") == "5m"
    with pytest.raises(InvalidInput, match="invalid concurrency 'many': an integer"):
        queue_rules.from_text("concurrency", "many")


@given(aging_secs=st.floats(0.001, 365 * 86400.0), count=st.integers(1, 10**6),
       period=st.floats(0.001, 86400.0))
def test_params_and_differs_agree(aging_secs, count, period):
    checked = queue_rules.check({"aging": aging_secs, "rate": (count, period)})
    p = queue_rules.params(checked)
    assert p["set_aging"] and p["set_rate"] and not p["set_concurrency"]
    row = {"aging": p["aging"], "rate_limit": p["rate_limit"], "rate_period": p["rate_period"]}
    assert queue_rules.differs(checked, row) == []
    assert queue_rules.differs(checked, {**row, "aging": p["aging"] + 1}) == ["aging"]


# --- aging policy -------------------------------------------------------------------------

intervals = st.floats(0.001, 365 * 86400.0, allow_nan=False)


@given(a=intervals, b=intervals)
def test_sweep_interval_is_bounded_monotone_and_a_fraction_of_the_step(a, b):
    lo, hi = sorted((a, b))
    assert aging.SWEEP_MIN <= aging.sweep_interval(lo) <= aging.sweep_interval(hi) <= aging.SWEEP_MAX
    if lo >= aging.SWEEP_MIN * aging.SWEEPS_PER_STEP:
        assert aging.sweep_interval(lo) <= lo / aging.SWEEPS_PER_STEP + 1e-12


@given(st.lists(intervals, max_size=5))
def test_next_wait_never_exceeds_the_idle_poll_or_a_queue_interval(found):
    wait = aging.next_wait([aging.sweep_interval(a) for a in found])
    assert 0 < wait <= aging.IDLE_POLL
    assert all(wait <= aging.sweep_interval(a) for a in found)


@given(p=st.integers(-100, 100), waited=st.floats(0, 1e7), a=st.floats(0.001, 1e5))
def test_effective_priority_stays_in_range_and_never_rises(p, waited, a):
    got = aging.effective_priority(p, waited, a)
    assert aging.PRIORITY_MIN <= got <= p
    assert aging.effective_priority(p, waited, None) == p
    if waited >= (p - aging.PRIORITY_MIN) * a:
        assert got == aging.PRIORITY_MIN


@given(p=st.integers(-100, 100), w1=st.floats(0, 1e6), w2=st.floats(0, 1e6),
       a=st.floats(0.001, 1e4))
def test_longer_waits_never_make_a_job_worse(p, w1, w2, a):
    lo, hi = sorted((w1, w2))
    assert aging.effective_priority(p, hi, a) <= aging.effective_priority(p, lo, a)


@given(p=st.integers(-100, 100), a=st.floats(0.001, 1e4), lag=st.floats(0, 100),
       ahead=st.integers(0, 10**6), x=st.floats(0.1, 1e5))
def test_the_bound_covers_the_steps_the_lag_and_the_drain(p, a, lag, ahead, x):
    bound = aging.starvation_bound(p, a, lag, ahead, x)
    # by then every step is due, so the job is at the top level (float rounding: the
    # subtraction loses up to a few ulps of the bound, not of the difference)
    waited = (bound - lag - ahead / x) + 1e-9 * max(1.0, bound)
    assert aging.effective_priority(p, waited, a) == aging.PRIORITY_MIN
    assert bound >= ahead / x and aging.starvation_bound(p, a, lag, ahead, 0) == math.inf
