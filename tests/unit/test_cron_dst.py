"""Cron fire times across DST: vectors for three zones, and properties of the policy."""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings, strategies as st

from jobrun.errors import InvalidInput
from jobrun.policy import cron

from tests.profiles import examples

UTC = timezone.utc


def fires(expr: str, tz: str, after: datetime, n: int) -> list[str]:
    out, t = [], after
    for _ in range(n):
        t = cron.next_fire(expr, tz, t)
        out.append(t.astimezone(cron.zone(tz)).isoformat())
    return out


# (expression, zone, after (UTC), expected local fire times)
VECTORS = [
    # Fall back, fixed hour: 01:30 happens twice, fires once (first occurrence, EDT).
    ("30 1 * * *", "America/New_York", datetime(2027, 11, 6, 12, tzinfo=UTC),
     ["2027-11-07T01:30:00-04:00", "2027-11-08T01:30:00-05:00"]),
    # Spring forward, fixed hour: 02:30 does not exist, fires when the gap ends (03:00 EDT).
    ("30 2 * * *", "America/New_York", datetime(2027, 3, 13, 12, tzinfo=UTC),
     ["2027-03-14T03:00:00-04:00", "2027-03-15T02:30:00-04:00"]),
    # Wildcard hour follows real time: the repeated hour fires twice, the missing one never.
    ("*/30 * * * *", "America/New_York", datetime(2027, 11, 7, 4, 45, tzinfo=UTC),
     ["2027-11-07T01:00:00-04:00", "2027-11-07T01:30:00-04:00", "2027-11-07T01:00:00-05:00",
      "2027-11-07T01:30:00-05:00", "2027-11-07T02:00:00-05:00"]),
    ("*/30 * * * *", "America/New_York", datetime(2027, 3, 14, 5, 45, tzinfo=UTC),
     ["2027-03-14T01:00:00-05:00", "2027-03-14T01:30:00-05:00", "2027-03-14T03:00:00-04:00"]),
    # Europe/London: 01:00-02:00 is skipped in March, repeated in October.
    ("15 1 * * *", "Europe/London", datetime(2027, 3, 27, 12, tzinfo=UTC),
     ["2027-03-28T02:00:00+01:00", "2027-03-29T01:15:00+01:00"]),
    ("15 1 * * *", "Europe/London", datetime(2027, 10, 30, 12, tzinfo=UTC),
     ["2027-10-31T01:15:00+01:00", "2027-11-01T01:15:00+00:00"]),
    ("0 * * * *", "Europe/London", datetime(2027, 10, 30, 23, 30, tzinfo=UTC),
     ["2027-10-31T01:00:00+01:00", "2027-10-31T01:00:00+00:00", "2027-10-31T02:00:00+00:00"]),
    # A fixed hour with every minute: the gap's 60 slots collapse into one fire at its end.
    ("* 1 * * *", "Europe/London", datetime(2027, 3, 28, 0, 58, tzinfo=UTC),
     ["2027-03-28T02:00:00+01:00", "2027-03-29T01:00:00+01:00", "2027-03-29T01:01:00+01:00"]),
    # Australia/Lord_Howe moves by 30 minutes: 02:00 -> 02:30 in October, 02:00 -> 01:30 in April.
    ("15 2 * * *", "Australia/Lord_Howe", datetime(2027, 10, 2, 0, tzinfo=UTC),
     ["2027-10-03T02:30:00+11:00", "2027-10-04T02:15:00+11:00"]),
    ("45 1 * * *", "Australia/Lord_Howe", datetime(2027, 4, 3, 0, tzinfo=UTC),
     ["2027-04-04T01:45:00+11:00", "2027-04-05T01:45:00+10:30"]),
    ("*/15 * * * *", "Australia/Lord_Howe", datetime(2027, 4, 3, 14, 20, tzinfo=UTC),
     ["2027-04-04T01:30:00+11:00", "2027-04-04T01:45:00+11:00", "2027-04-04T01:30:00+10:30",
      "2027-04-04T01:45:00+10:30", "2027-04-04T02:00:00+10:30"]),
    # Six fields: seconds first; aliases.
    ("*/20 * * * * *", "UTC", datetime(2027, 1, 1, tzinfo=UTC),
     ["2027-01-01T00:00:20+00:00", "2027-01-01T00:00:40+00:00", "2027-01-01T00:01:00+00:00"]),
    ("@daily", "Europe/London", datetime(2027, 6, 1, 12, tzinfo=UTC),
     ["2027-06-02T00:00:00+01:00", "2027-06-03T00:00:00+01:00"]),
    ("@weekly", "UTC", datetime(2027, 1, 1, tzinfo=UTC), ["2027-01-03T00:00:00+00:00"]),
    ("@hourly", "UTC", datetime(2027, 1, 1, 0, 0, tzinfo=UTC), ["2027-01-01T01:00:00+00:00"]),
]


@pytest.mark.parametrize("expr, tz, after, expected", VECTORS)
def test_dst_vectors(expr, tz, after, expected):
    assert fires(expr, tz, after, len(expected)) == expected


def test_croniter_alone_fires_twice_on_the_fall_back_day():
    # Why this module maps wall time itself: croniter's own zone handling doubles the slot.
    from croniter import croniter
    from zoneinfo import ZoneInfo

    it = croniter("30 1 * * *", datetime(2027, 11, 6, 12, tzinfo=ZoneInfo("America/New_York")))
    got = [it.get_next(datetime) for _ in range(3)]
    assert sum(1 for d in got if d.date().isoformat() == "2027-11-07") == 2
    ours = fires("30 1 * * *", "America/New_York", datetime(2027, 11, 6, 17, tzinfo=UTC), 3)
    assert sum(1 for d in ours if d.startswith("2027-11-07")) == 1


@pytest.mark.parametrize("bad, message", [
    ("* * *", "has 3 fields"), ("61 * * * *", "invalid cron expression"),
    ("@every", "unknown cron alias"), ("H * * * *", "invalid field"),
    ("* * * * * * *", "has 7 fields"), ("", "non-empty"), ("0 0 ? * *", "invalid field"),
])
def test_invalid_expressions(bad, message):
    with pytest.raises(InvalidInput, match=message):
        cron.parse(bad)


@pytest.mark.parametrize("bad", ["Mars/Olympus", "", "../etc/passwd", "/etc/localtime", "x" * 70])
def test_unknown_zones(bad):
    with pytest.raises(InvalidInput, match="unknown time zone"):
        cron.zone(bad)


def test_an_impossible_date_has_no_fire():
    assert cron.next_fire("0 0 30 2 *", "UTC", datetime(2027, 1, 1, tzinfo=UTC)) is None


def test_window_end_bounds_the_next_fire():
    after = datetime(2027, 1, 1, tzinfo=UTC)
    assert cron.next_fire("0 * * * *", "UTC", after, until=after + timedelta(minutes=59)) is None
    assert cron.first_fire("0 * * * *", "UTC", after, starts_at=after + timedelta(hours=5)) \
        == after + timedelta(hours=5)


# --- catch-up -------------------------------------------------------------------------------

T0 = datetime(2027, 1, 1, tzinfo=UTC)


def test_catch_up_latest_fires_the_newest_missed_slot():
    d = cron.due("* * * * *", "UTC", T0, T0 + timedelta(minutes=10, seconds=5), "latest")
    assert d.fire == [T0 + timedelta(minutes=10)] and d.skipped == 10
    assert d.next_at == T0 + timedelta(minutes=11)


def test_catch_up_all_fires_every_missed_slot_up_to_the_cap():
    d = cron.due("* * * * *", "UTC", T0, T0 + timedelta(minutes=10, seconds=5), "all")
    assert d.fire == [T0 + timedelta(minutes=m) for m in range(11)] and d.skipped == 0
    d = cron.due("* * * * *", "UTC", T0, T0 + timedelta(minutes=10, seconds=5), "all", cap=3)
    assert d.fire == [T0 + timedelta(minutes=m) for m in (8, 9, 10)] and d.skipped == 8


def test_catch_up_none_fires_only_a_slot_on_time():
    d = cron.due("* * * * *", "UTC", T0, T0 + timedelta(minutes=10, seconds=30), "none")
    assert d.fire == [] and d.skipped == 11 and d.next_at == T0 + timedelta(minutes=11)
    d = cron.due("* * * * *", "UTC", T0, T0 + timedelta(seconds=2), "none")
    assert d.fire == [T0] and d.skipped == 0


def test_due_after_the_window_expires():
    d = cron.due("* * * * *", "UTC", T0, T0 + timedelta(minutes=5), "latest",
                 ends_at=T0 + timedelta(minutes=2))
    assert d.fire == [T0 + timedelta(minutes=2)] and d.next_at is None


def test_a_long_outage_is_decided_quickly_and_fires_the_newest_slot():
    now = T0 + timedelta(days=1, seconds=0.5)
    d = cron.due("* * * * * *", "UTC", T0, now, "latest")
    assert d.fire == [T0 + timedelta(days=1)] and d.skipped >= cron.WALK_LIMIT
    d = cron.due("* * * * * *", "UTC", T0, now, "all", cap=5)
    assert d.fire == [T0 + timedelta(days=1, seconds=s - 4) for s in range(5)]


# --- properties -------------------------------------------------------------------------------

ZONES = ["UTC", "Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata",
         "America/Sao_Paulo", "Pacific/Chatham"]
EXPRS = ["*/7 * * * *", "30 1 * * *", "0 2 * * *", "45 1,2 * * *", "* 1 * * *", "*/20 * * * * *",
         "15 */2 * * *", "0 0 * * 0", "@hourly", "0,30 0-3 * * *", "59 23 * * *"]
# Instants around DST changes are where things break: draw from years 2026-2028, any second.
instants = st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2028, 12, 31),
                        timezones=st.just(UTC))


@settings(max_examples=examples(300), deadline=None)
@given(expr=st.sampled_from(EXPRS), tz=st.sampled_from(ZONES), after=instants)
def test_fire_times_strictly_increase_and_match_the_expression(expr, tz, after):
    c, z = cron.parse(expr), cron.zone(tz)
    seen = []
    t = after
    for _ in range(30):
        t = cron.next_fire(c, z, t)
        assert t is not None and t > (seen[-1] if seen else after)
        seen.append(t)
    # Nothing in between was skipped: no fire lies strictly between two consecutive ones.
    for a, b in zip(seen, seen[1:]):
        assert cron.next_fire(c, z, a) == b
    if c.fixed_hour:
        # No two fires of a fixed-hour schedule share one wall-clock slot.
        walls = [s.astimezone(z).replace(tzinfo=None) for s in seen]
        assert len(set(walls)) == len(walls)


@settings(max_examples=examples(200), deadline=None)
@given(expr=st.sampled_from(EXPRS), tz=st.sampled_from(ZONES), after=instants,
       gap=st.integers(min_value=0, max_value=6 * 3600), policy=st.sampled_from(cron.CATCH_UP))
def test_due_fires_a_subset_of_the_slots_and_moves_past_now(expr, tz, after, gap, policy):
    first = cron.next_fire(expr, tz, after)
    now = first + timedelta(seconds=gap)
    d = cron.due(expr, tz, first, now, policy, cap=5)
    slots = cron.fires_between(expr, tz, first - timedelta(microseconds=1), now, 10_000)
    assert set(d.fire) <= set(slots) and d.fire == sorted(d.fire)
    assert len(d.fire) + d.skipped == len(slots) or d.skipped >= cron.WALK_LIMIT
    assert d.next_at is not None and d.next_at > now
    assert d.next_at == cron.next_fire(expr, tz, now)
    if policy == "latest":
        assert d.fire == [slots[-1]]
    if policy == "all":
        assert d.fire == slots[-5:]
