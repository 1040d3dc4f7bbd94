"""A schedule in words: "every day at 02:30, New York time". A pure function (no I/O, no clock).

``describe(expression, zone)`` reads the shapes people write most (a fixed time every day or on
some weekdays, one day of the month or of the year, every N minutes or hours, at a minute past
every hour) and gives anything else as the expression itself, with the zone: a description
that would have to guess is worse than the cron text. It never raises: an expression the
scheduler would refuse never reaches a stored schedule, and if it did, its text is still true.

The words say what croniter matches in the schedule's zone (jobrun.policy.cron); the DST rules
(a daily 02:30 in a spring-forward gap fires once, at 03:00) are docs/schedules.md's, not
repeated here.
"""

from __future__ import annotations

import re

from jobrun.policy.cron import ALIASES

DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
_NUMBER = re.compile(r"^(0|[1-9][0-9]?)$")
_STEP = re.compile(r"^\*/([1-9][0-9]?)$")


def zone_words(zone: str) -> str:
    """"America/New_York" -> "New York time"; UTC stays "UTC"."""
    if zone in ("UTC", "Etc/UTC", "Etc/GMT", "GMT", ""):
        return "UTC"
    return zone.rsplit("/", 1)[-1].replace("_", " ") + " time"


def describe(expression: str, zone: str = "UTC") -> str:
    """``expression`` (5 fields or an alias) in ``zone`` as words; any other shape as the
    expression itself, followed by the zone."""
    text = " ".join(expression.split())
    words = _cadence(ALIASES.get(text.lower(), text))
    return f"{words or text}, {zone_words(zone)}"


def _number(field: str, low: int, high: int) -> int | None:
    if not _NUMBER.match(field):
        return None
    n = int(field)
    return n if low <= n <= high else None


def _numbers(field: str, low: int, high: int) -> list[int] | None:
    """A list of single values ("9,17"), in order, or None for any other field."""
    found = [_number(part, low, high) for part in field.split(",")]
    if not found or any(n is None for n in found) or len(set(found)) != len(found):
        return None
    return sorted(n for n in found if n is not None)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _weekdays(field: str) -> str | None:
    """"1-5" -> "Monday to Friday"; "1,3,5" -> "Monday, Wednesday and Friday"; 7 is Sunday."""
    span = re.match(r"^([0-7])-([0-7])$", field)
    if span:
        first, last = int(span[1]), int(span[2])
        if first >= last:
            return None
        if len({d % 7 for d in range(first, last + 1)}) == 7:
            return "day"
        return f"{DAYS[first % 7]} to {DAYS[last % 7]}"
    days = _numbers(field, 0, 7)
    if days is None:
        return None
    named = sorted({d % 7 for d in days}, key=lambda d: (d == 0, d))  # Monday first
    return _listed([DAYS[d] for d in named]) if len(named) == len(days) else None


def _past(minute: int) -> str:
    return f"{minute} minute{'' if minute == 1 else 's'} past"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _cadence(five: str) -> str | None:
    fields = five.split(" ")
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    every_day = dom == "*" and month == "*" and dow == "*"
    m = _number(minute, 0, 59)
    if every_day and hour == "*":
        if minute == "*":
            return "every minute"
        step = _STEP.match(minute)
        if step:
            return f"every {step[1]} minutes" if step[1] != "1" else "every minute"
        if m is not None:
            return "every hour, on the hour" if m == 0 else f"every hour at {_past(m)}"
        return None
    if m is None:
        return None
    step = _STEP.match(hour)
    if every_day and step:
        n = int(step[1])
        past = "" if m == 0 else f", at {_past(m)}"
        return ("every hour" if n == 1 else f"every {n} hours") + past
    hours = _numbers(hour, 0, 23)
    if hours is None:
        return None
    at = "at " + _listed([f"{h:02d}:{m:02d}" for h in hours])
    if every_day:
        return f"every day {at}"
    if dom == "*" and month == "*":
        days = _weekdays(dow)
        return f"every {days} {at}" if days else None
    day = _number(dom, 1, 31)
    if day is None or dow != "*":
        return None
    if month == "*":
        return f"every month on the {_ordinal(day)} {at}"
    mon = _number(month, 1, 12)
    return f"every year on {day} {MONTHS[mon - 1]} {at}" if mon is not None else None
