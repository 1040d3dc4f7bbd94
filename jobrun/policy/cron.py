"""Cron expressions and their fire times, DST-correct: a pure policy (no I/O, no clock).

Expressions have 5 fields (minute hour day month weekday) or 6 with a leading seconds field,
or one of the aliases @hourly, @daily (@midnight), @weekly, @monthly, @yearly (@annually).
croniter matches the fields; it walks *local wall-clock time* only (naive datetimes), and
this module maps each wall-clock slot to UTC itself with zoneinfo, because croniter's own
zone handling is wrong across DST (it returns a daily 01:30 America/New_York schedule twice
on 2027-11-07).

DST policy (docs/schedules.md; tests/unit/test_cron_dst.py holds the vectors):

    fixed hour (the hour field names hours: "30 1 * * *", "0 9,17 * * 1-5")
        a wall time in a spring-forward gap  -> fires once, at the first instant after it
        a wall time that happens twice       -> fires once, at its first occurrence
    wildcard or step hour ("*/15 * * * *", "0 */2 * * *"): real time, as Vixie cron
        a wall time in a gap                 -> does not exist, no fire
        a wall time that happens twice       -> fires at both occurrences

Fire times strictly increase: a slot that maps onto an instant already passed (several gap
slots collapse onto the instant the gap ends) is not fired again.

Fire times lie from FIRST_INSTANT to LAST_INSTANT (UTC): Python's datetimes end with the years
1 and 9999, and the search looks up to a day around wall-clock time, so it stays a few days
inside them. Past LAST_INSTANT there is no fire time (a schedule whose first slot would lie
there is refused: "no fire time left"); a search from before FIRST_INSTANT starts there.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from difflib import get_close_matches
from functools import lru_cache
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobrun.errors import InvalidInput

if TYPE_CHECKING:
    from croniter import croniter

UTC = timezone.utc
ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
CATCH_UP = ("latest", "all", "none")
# Policy "all" fires at most this many missed slots after an outage (the newest ones).
CATCH_UP_CAP = 100
# A due slot no older than this is on time (policy "none" fires it; older ones are missed).
ON_TIME = timedelta(seconds=5)
# Local times and UTC differ by at most this much more than the offset in force (DST shifts
# are at most 2 hours); the search for the next fire looks this far around wall-clock time.
_SHIFT = timedelta(hours=3)
FIRST_INSTANT = datetime(1, 1, 3, tzinfo=timezone.utc)
LAST_INSTANT = datetime(9999, 12, 29, tzinfo=timezone.utc)
_TICK = timedelta(microseconds=1)
RANGE = f"fire times lie from {FIRST_INSTANT.date()} to {LAST_INSTANT.date()} UTC"
# The field syntax croniter accepts that we keep: numbers, names, * / - , and L / # (last
# day, nth weekday). croniter's extensions (H hashing, R random) are refused.
_FIELD = re.compile(r"^[0-9A-Za-z*/,#-]+$")
_EXTENSION = re.compile(r"(^|[^A-Za-z])[HR]([^A-Za-z]|$)")


@dataclass(frozen=True)
class Cron:
    """A parsed expression: ``fields`` in croniter's order (seconds last when present)."""

    text: str
    fields: str
    fixed_hour: bool


@lru_cache(maxsize=1024)
def parse(text: str) -> Cron:
    """Parse and check an expression; a bad one raises InvalidInput with a one-line reason."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("cron expression must be a non-empty string")
    source = " ".join(text.split())
    expanded = ALIASES.get(source.lower(), source)
    if expanded.startswith("@"):
        raise InvalidInput(f"unknown cron alias {source!r}: one of {', '.join(ALIASES)}")
    parts = expanded.split(" ")
    if len(parts) not in (5, 6):
        raise InvalidInput(f"cron expression {source!r} has {len(parts)} fields; give 5"
                           " (minute hour day month weekday) or 6 (seconds first)")
    for part in parts:
        if not _FIELD.match(part) or _EXTENSION.search(part):
            raise InvalidInput(f"cron expression {source!r}: invalid field {part!r}")
    if len(parts) == 6:
        # croniter wants the seconds field last.
        parts = parts[1:] + parts[:1]
    fields = " ".join(parts)
    if not _croniter().is_valid(fields):
        raise InvalidInput(f"invalid cron expression {source!r}")
    hour = parts[1]
    return Cron(source, fields, fixed_hour="*" not in hour and "/" not in hour)


def _croniter() -> type[croniter]:
    """croniter, imported on first use: importing it runs ``file`` on the interpreter (its
    check for a 32-bit build), a process of its own, which every command that never reads a
    cron expression would pay for at start."""
    from croniter import croniter

    return croniter


@lru_cache(maxsize=1024)
def _expanded(fields: str) -> croniter:
    return _croniter()(fields, datetime(2000, 1, 1))


def _walker(fields: str) -> croniter:
    """A croniter over naive wall-clock time (parsing an expression costs ~1 ms: once)."""
    return copy.copy(_expanded(fields))


# Names the zone database holds that are not zones of their own, each with why it is refused.
NOT_ZONES = {
    "localtime": "the host's own zone: masters on hosts set to different zones would fire"
                 " one schedule at different instants",
    "posixrules": "the rules the C library applies to POSIX TZ strings, set per host",
    "Factory": "a placeholder for a host whose zone is not set",
}


@lru_cache(maxsize=1)
def zone_names() -> frozenset[str]:
    """The IANA zone names this host knows (its zone database, else the tzdata package),
    without NOT_ZONES. (zoneinfo.available_timezones() leaves out the posix/ and right/
    copies: right/ counts leap seconds, which no other clock here does.)"""
    from zoneinfo import available_timezones

    return frozenset(available_timezones() - set(NOT_ZONES))


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; any other name raises InvalidInput, suggesting a close one."""
    if not isinstance(name, str) or name not in zone_names():
        raise InvalidInput(_unknown_zone(name))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # listed, yet unreadable
        raise InvalidInput(_unknown_zone(name)) from None


def _unknown_zone(name: object) -> str:
    text = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
    use = "use an IANA name such as Europe/London or UTC"
    if isinstance(name, str) and name in NOT_ZONES:
        return f"time zone {text} is not a zone name ({NOT_ZONES[name]}): {use}"
    if isinstance(name, str) and 0 < len(name.strip()) <= 64:
        by_lower = {n.lower(): n for n in zone_names()}
        close = get_close_matches(name.strip().lower(), by_lower, n=1, cutoff=0.6)
        if close:
            use = f"did you mean {by_lower[close[0]]}?"
    return f"unknown time zone {text}: {use}"


def _gap_end(tz: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant (to the second) in (before, after] whose UTC offset differs from
    ``before``'s: where a spring-forward gap ends."""
    offset = before.astimezone(tz).utcoffset()
    lo, hi = 0, int((after - before).total_seconds())
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (before + timedelta(seconds=mid)).astimezone(tz).utcoffset() == offset:
            lo = mid
        else:
            hi = mid
    return before + timedelta(seconds=hi)


def instants(wall: datetime, tz: ZoneInfo, fixed_hour: bool) -> list[datetime]:
    """The UTC instants a wall-clock slot fires at, under the DST policy above."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    if first == second:
        return [first]
    if first < second:  # the wall time happens twice (fall back): fold 0 is the earlier one
        return [first] if fixed_hour else [first, second]
    # No such wall time (spring forward): fold 1 lies before the gap, fold 0 after it.
    return [_gap_end(tz, second, first)] if fixed_hour else []


def _offsets(tz: ZoneInfo, at: datetime) -> tuple[timedelta, timedelta]:
    """The least and greatest UTC offsets in force from ``at`` for the next day or so."""
    # Zones change offset at most twice a year: two samples a day apart see both offsets.
    a = at.astimezone(tz).utcoffset()
    b = (at + timedelta(hours=26)).astimezone(tz).utcoffset()
    return min(a, b), max(a, b)  # type: ignore[type-var]


def next_fire(cron: Cron | str, tz: ZoneInfo | str, after: datetime,
              until: datetime | None = None) -> datetime | None:
    """The first fire time strictly after ``after`` (aware), in UTC; None if there is none
    up to ``until`` (inclusive) or ever."""
    if isinstance(cron, str):
        cron = parse(cron)
    if isinstance(tz, str):
        tz = zone(tz)
    if after.tzinfo is None:
        raise ValueError("after must be timezone-aware")
    after = _in_range(after)
    if after is None:
        return None
    until = LAST_INSTANT if until is None else min(until, LAST_INSTANT)
    try:
        return _search(cron, tz, after, until)
    except OverflowError:  # a wall-clock slot past year 9999: none is left in range
        return None


def _in_range(after: datetime) -> datetime | None:
    """``after`` in UTC, moved up to just before FIRST_INSTANT; None at or past LAST_INSTANT."""
    try:
        utc = after.astimezone(UTC)
    except OverflowError:  # a local time in year 1 or 9999 whose UTC time is beyond it
        return None if after.year > 1 else FIRST_INSTANT - _TICK
    if utc >= LAST_INSTANT:
        return None
    return max(utc, FIRST_INSTANT - _TICK)


def _search(cron: Cron, tz: ZoneInfo, after: datetime, until: datetime) -> datetime | None:
    low, high = _offsets(tz, after)
    # Every instant u > after has wall time u + offset(u) > after + low: start just before.
    start = (after + low).replace(tzinfo=None) - timedelta(seconds=1)
    from croniter.croniter import CroniterBadDateError

    walls = _walker(cron.fields)
    walls.set_current(start, force=True)
    best: datetime | None = None
    while True:
        try:
            wall = walls.get_next(datetime)
        except (CroniterBadDateError, OverflowError, ValueError):
            return best  # never again, or not before year 10000 (ValueError: dateutil's word)
        # No instant of this slot or a later one can come before `earliest`.
        earliest = wall.replace(tzinfo=UTC) - high
        if earliest > until:
            return best
        for instant in instants(wall, tz, cron.fixed_hour):
            if after < instant <= until and (best is None or instant < best):
                best = instant
        if best is not None and earliest >= best:
            return best


def fires_between(cron: Cron | str, tz: ZoneInfo | str, after: datetime, until: datetime,
                  limit: int) -> list[datetime]:
    """Fire times in (after, until], at most ``limit`` of them, oldest first."""
    out: list[datetime] = []
    t = after
    while len(out) < limit:
        nxt = next_fire(cron, tz, t, until)
        if nxt is None:
            break
        out.append(nxt)
        t = nxt
    return out


@dataclass(frozen=True)
class Due:
    """What a leader does with a schedule whose next fire has come: fire ``fire`` (slot
    times, oldest first), count ``skipped`` missed slots, and store ``next_at`` (None: no
    fire left, the schedule has expired)."""

    fire: list[datetime]
    skipped: int
    next_at: datetime | None


# The most missed slots counted one by one after an outage; beyond, the newest are found
# directly and the count stops there (a seconds schedule down for a day missed 86,400; walking 1,000 costs ~0.2 s).
WALK_LIMIT = 1_000


def _newest_slots(cron: Cron, tz: ZoneInfo, first: datetime, stop: datetime,
                  keep: int) -> tuple[list[datetime], int]:
    """The newest ``keep`` slots in [first, stop], and how many slots that range holds
    (counted up to WALK_LIMIT)."""
    slots = [first]
    total = 1
    while True:
        nxt = next_fire(cron, tz, slots[-1], stop)
        if nxt is None:
            return slots, total
        total += 1
        slots.append(nxt)
        if len(slots) > keep:
            del slots[0]
        if total >= WALK_LIMIT:
            break
    # Too many to walk: search back from stop for a start that still has `keep` slots.
    back = timedelta(seconds=1)
    while True:
        start = max(slots[-1], stop - back)
        found = fires_between(cron, tz, start, stop, WALK_LIMIT)
        if len(found) >= keep or start == slots[-1]:
            break
        back *= 2
    merged = (slots + found) if start == slots[-1] else found
    return merged[-keep:], total + len(found)


def due(cron: Cron | str, tz: ZoneInfo | str, first: datetime, now: datetime,
        catch_up: str, ends_at: datetime | None = None, cap: int = CATCH_UP_CAP) -> Due:
    """Decide the fires of a schedule whose first unfired slot is ``first``.

    latest: one job, for the newest due slot; all: every due slot (the newest ``cap``);
    none: only a slot that is on time (within ON_TIME of now). The rest are skipped.
    """
    if catch_up not in CATCH_UP:
        raise InvalidInput(f"catch-up must be one of {', '.join(CATCH_UP)}")
    if isinstance(cron, str):
        cron = parse(cron)
    if isinstance(tz, str):
        tz = zone(tz)
    if ends_at is not None and first > ends_at:
        return Due([], 0, None)
    if first > now:
        return Due([], 0, first)
    stop = min(now, ends_at) if ends_at is not None else now
    slots, total = _newest_slots(cron, tz, first, stop, cap if catch_up == "all" else 1)
    if catch_up == "none":
        slots = [s for s in slots if now - s <= ON_TIME]
    return Due(slots, total - len(slots), next_fire(cron, tz, now, ends_at))


def first_fire(cron: Cron | str, tz: ZoneInfo | str, now: datetime,
               starts_at: datetime | None = None, ends_at: datetime | None = None) -> datetime | None:
    """A new (or resumed, or changed) schedule's first slot: the first fire after now and
    not before starts_at; None when none is left before ends_at."""
    after = now
    if starts_at is not None and starts_at > now:
        after = max(starts_at, FIRST_INSTANT) - _TICK
    return next_fire(cron, tz, after, ends_at)
