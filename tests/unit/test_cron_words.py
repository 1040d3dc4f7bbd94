"""A schedule in words (jobrun.policy.cron_words): the common shapes read as a person would say
them, every other expression as itself; the words agree with the fire times the scheduler
computes (jobrun.policy.cron), and describe() never raises."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, strategies as st

from jobrun.policy import cron
from jobrun.policy.cron_words import DAYS, describe, zone_words

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("expression, zone, words", [
    ("30 2 * * *", "America/New_York", "every day at 02:30, New York time"),
    ("@daily", "UTC", "every day at 00:00, UTC"),
    ("@hourly", "Europe/London", "every hour, on the hour, London time"),
    ("@weekly", "UTC", "every Sunday at 00:00, UTC"),
    ("@monthly", "UTC", "every month on the 1st at 00:00, UTC"),
    ("@yearly", "UTC", "every year on 1 January at 00:00, UTC"),
    ("*/15 * * * *", "UTC", "every 15 minutes, UTC"),
    ("* * * * *", "UTC", "every minute, UTC"),
    ("5 * * * *", "UTC", "every hour at 5 minutes past, UTC"),
    ("0 */2 * * *", "Asia/Tokyo", "every 2 hours, Tokyo time"),
    ("30 */6 * * *", "UTC", "every 6 hours, at 30 minutes past, UTC"),
    ("0 9,17 * * *", "UTC", "every day at 09:00 and 17:00, UTC"),
    ("0 9 * * 1-5", "Europe/Paris", "every Monday to Friday at 09:00, Paris time"),
    ("0 9 * * 1,3,5", "UTC", "every Monday, Wednesday and Friday at 09:00, UTC"),
    ("0 9 * * 6,0", "UTC", "every Saturday and Sunday at 09:00, UTC"),
    ("0 9 * * 7", "UTC", "every Sunday at 09:00, UTC"),
    ("0 9 * * 0-6", "UTC", "every day at 09:00, UTC"),
    ("15 3 22 * *", "UTC", "every month on the 22nd at 03:15, UTC"),
    ("0 12 11 * *", "UTC", "every month on the 11th at 12:00, UTC"),
    ("0 0 25 12 *", "UTC", "every year on 25 December at 00:00, UTC"),
    ("30  2 * *  *", "UTC", "every day at 02:30, UTC"),            # spaces as typed
    # Shapes it does not read: the expression itself, with the zone.
    ("0 9 1 * 1", "UTC", "0 9 1 * 1, UTC"),                        # day of month OR weekday
    ("0 9-17 * * *", "UTC", "0 9-17 * * *, UTC"),
    ("0 0 * * MON", "UTC", "0 0 * * MON, UTC"),
    ("*/5 9 * * *", "UTC", "*/5 9 * * *, UTC"),
    ("0 0 0 * * *", "UTC", "0 0 0 * * *, UTC"),                    # a seconds field
    ("0 9 * * 5-1", "UTC", "0 9 * * 5-1, UTC"),
])
def test_common_shapes_in_words(expression, zone, words):
    assert describe(expression, zone) == words


def test_zone_words():
    assert zone_words("UTC") == "UTC" and zone_words("Etc/UTC") == "UTC"
    assert zone_words("America/Argentina/Buenos_Aires") == "Buenos Aires time"


@given(st.text(max_size=40), st.text(max_size=30))
def test_never_raises(expression, zone):
    assert isinstance(describe(expression, zone), str)


FIELD = st.one_of(st.just("*"), st.integers(0, 59).map(str),
                  st.integers(1, 30).map(lambda n: f"*/{n}"),
                  st.lists(st.integers(0, 23), min_size=2, max_size=3, unique=True)
                  .map(lambda xs: ",".join(map(str, xs))))


@given(st.tuples(FIELD, FIELD, FIELD, FIELD, FIELD).map(" ".join))
def test_an_expression_it_cannot_read_is_given_as_itself(expression):
    words = describe(expression, "UTC")
    assert words.startswith("every ") or words == f"{expression}, UTC"


@given(minute=st.integers(0, 59), hours=st.lists(st.integers(0, 23), min_size=1, max_size=3,
                                                 unique=True),
       days=st.one_of(st.none(), st.lists(st.integers(0, 6), min_size=1, max_size=6,
                                          unique=True)),
       zone=st.sampled_from(["UTC", "America/New_York", "Europe/London", "Asia/Kolkata"]))
def test_the_words_name_the_fire_times(minute, hours, days, zone):
    """Daily and weekday shapes: each of the next fires (in the zone) is on a day and at a time
    the words name, and every time they name is among those fires."""
    dow = "*" if days is None else ",".join(map(str, days))
    expression = f"{minute} {','.join(map(str, hours))} * * {dow}"
    words = describe(expression, zone)
    assert words.endswith(", UTC" if zone == "UTC" else f"{zone_words(zone)}")
    at = datetime(2027, 1, 4, tzinfo=timezone.utc)
    seen = set()
    for _ in range(3 * len(hours) * 7):
        at = cron.next_fire(expression, zone, at)
        local = at.astimezone(ZoneInfo(zone))
        assert f"{local:%H:%M}" in words, (expression, zone, local)
        if days is not None:
            assert DAYS[(local.weekday() + 1) % 7] in words
        seen.add(f"{local:%H:%M}")
    assert seen == {f"{h:02d}:{minute:02d}" for h in hours}
