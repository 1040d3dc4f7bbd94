"""The ranges bad input is checked against, as properties: integers against PostgreSQL's
bigint, fire times against the ends of the calendar, zone names against the zone database,
command-line bytes against UTF-8. (tests/db/test_input_ranges.py drives the same through the
Client, the CLI and the scheduler.)"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jobrun import validate
from jobrun.errors import InvalidInput
from jobrun.policy import cron
from jobrun.redact import title_without_secrets, undecodable_argument
from tests.profiles import examples

UTC = timezone.utc
BIGINT_MAX = 2**63 - 1

# --- integers -------------------------------------------------------------------------------

ints = st.one_of(st.integers(), st.integers(BIGINT_MAX - 3, BIGINT_MAX + 3),
                 st.integers(-3, 3), st.integers(-BIGINT_MAX - 4, -BIGINT_MAX + 2))
anything = st.one_of(ints, st.booleans(), st.floats(), st.text(max_size=3), st.none())


@given(value=anything)
def test_versions_ids_and_attempts_take_exactly_their_columns_range(value):
    for check, field, low, high, none_ok in [
        (validate.version, "version", 0, BIGINT_MAX, True),
        (validate.job_id, "job id", 1, BIGINT_MAX, False),
        (validate.attempt_number, "attempt", 1, 2**31 - 1, False),
    ]:
        if value is None and none_ok:
            assert check(value) is None
        elif type(value) is int and low <= value <= high:
            assert check(value) == value
        else:
            with pytest.raises(InvalidInput, match=f"^invalid {field} .*: an integer from {low}"
                                                   f" to {high}$"):
                check(value)


# --- the ends of the calendar ---------------------------------------------------------------

EXPRS = ["0 0 * * *", "@yearly", "* * * * * *", "0 0 L * *", "0 0 31 12 *", "30 1 * * *",
         "*/15 * * * *", "0 0 29 2 *"]
ZONES = ["UTC", "America/New_York", "Pacific/Kiritimati", "Etc/GMT+12", "Asia/Manila",
         "Australia/Lord_Howe"]
offsets = st.sampled_from([UTC, timezone(timedelta(hours=-12)), timezone(timedelta(hours=14)),
                           timezone(timedelta(hours=5, minutes=30))])
LAST = datetime(9999, 12, 31, 23, 59, 59, 999999)
ends = st.one_of(st.datetimes(datetime(1, 1, 1), datetime(1, 1, 10), timezones=offsets),
                 st.datetimes(datetime(9999, 12, 20), LAST, timezones=offsets),
                 st.datetimes(datetime(1, 1, 1), LAST, timezones=offsets))


@settings(max_examples=examples(300), deadline=None)
@given(expr=st.sampled_from(EXPRS), tz=st.sampled_from(ZONES), after=ends)
def test_a_fire_time_is_in_range_or_there_is_none(expr, tz, after):
    found = cron.next_fire(expr, tz, after)
    if found is not None:
        assert cron.FIRST_INSTANT <= found <= cron.LAST_INSTANT
        assert found > after
        assert cron.next_fire(expr, tz, found - timedelta(microseconds=1)) == found
    if after >= cron.LAST_INSTANT:
        assert found is None


@settings(max_examples=examples(200), deadline=None)
@given(expr=st.sampled_from(EXPRS), tz=st.sampled_from(ZONES), starts=ends,
       ends_at=st.none() | ends, now=ends)
def test_a_schedules_first_slot_never_raises_at_the_ends(expr, tz, starts, ends_at, now):
    first = cron.first_fire(expr, tz, now, starts, ends_at)
    assert first is None or (first > now and first >= starts
                             and (ends_at is None or first <= ends_at))


@settings(max_examples=examples(100), deadline=None)
@given(expr=st.sampled_from(EXPRS), tz=st.sampled_from(ZONES), first=ends,
       gap=st.integers(0, 3 * 86400), policy=st.sampled_from(cron.CATCH_UP))
def test_the_leaders_decision_never_raises_at_the_ends(expr, tz, first, gap, policy):
    try:
        now = first + timedelta(seconds=gap)
    except OverflowError:
        now = LAST.replace(tzinfo=first.tzinfo)
    d = cron.due(expr, tz, first, now, policy, cap=3)
    assert d.next_at is None or d.next_at <= cron.LAST_INSTANT


# --- time zone names ------------------------------------------------------------------------

NAMES = sorted(cron.zone_names())


@given(name=st.sampled_from(NAMES))
def test_every_listed_zone_is_taken_and_its_lower_case_suggests_it(name):
    assert cron.zone(name).key == name
    if name.lower() not in cron.zone_names():
        with pytest.raises(InvalidInput) as info:
            cron.zone(name.lower())
        assert str(info.value).endswith(f"did you mean {name}?")


@settings(max_examples=examples(300))
@given(name=st.one_of(st.text(max_size=70), st.sampled_from(NAMES).map(lambda n: n[1:]),
                      st.sampled_from(NAMES).map(lambda n: n + "x"),
                      st.sampled_from(sorted(cron.NOT_ZONES) + ["", " ", "UTC ", "right/UTC",
                                                                "posix/Europe/Paris"])))
def test_any_other_name_is_refused_in_one_line_suggesting_a_zone(name):
    assume(name not in cron.zone_names())
    with pytest.raises(InvalidInput) as info:
        cron.zone(name)
    message = str(info.value)
    assert "\n" not in message and len(message) < 300
    if "did you mean " in message:
        assert message.rsplit("did you mean ", 1)[1].rstrip("?") in cron.zone_names()
    else:
        assert message.endswith("use an IANA name such as Europe/London or UTC")


def test_the_database_files_that_are_not_zones_are_not_listed():
    assert not set(cron.NOT_ZONES) & cron.zone_names()
    assert {"UTC", "Europe/London", "America/New_York"} <= cron.zone_names()


# --- command-line bytes ---------------------------------------------------------------------

def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@given(raw=st.lists(st.binary(max_size=12), max_size=5))
def test_any_bytes_make_a_title_and_only_bytes_that_are_not_utf8_are_refused(raw):
    argv = [os.fsdecode(b.replace(b"\x00", b"")) for b in raw]  # as sys.argv holds them
    title = title_without_secrets(["jobrun", *argv])
    title.encode("utf-8")  # setproctitle's encoding: must not raise
    bad = undecodable_argument(argv)
    assert (bad is None) == all(_utf8(b.replace(b"\x00", b"")) for b in raw)
    if bad is not None:
        assert "\n" not in bad and bad.endswith("is not valid UTF-8")


@given(password=st.text(st.characters(min_codepoint=33, max_codepoint=126,
                                      exclude_characters="@/:?#%'\\"), min_size=4, max_size=12))
def test_a_dsn_that_is_not_utf8_is_named_not_shown(password):
    dsn = os.fsdecode(f"postgresql://u:{password}".encode() + b"\xff@db/x")
    for argv in (["--dsn", dsn, "stats"], [f"--dsn={dsn}", "stats"]):
        assert undecodable_argument(argv) == "the value of --dsn is not valid UTF-8"
        assert password not in title_without_secrets(["jobrun", *argv])
