"""The rules of a queue's settings: pure functions, no I/O, one clear line per bad value.

A change names only the settings it sets; ``None`` clears a setting that may be unset
(concurrency, rate, aging, max_attempts, retention). Intervals are seconds (floats) here and in
every output (the API, ``--json``); text such as ``"30s"`` or ``"50/s"`` is parsed by
:func:`jobrun.validate.duration` and :func:`jobrun.validate.rate`. The same ranges are CHECK
constraints of the queues table (migration 0007), so SQL callers meet them too.
"""

from __future__ import annotations

import math
from typing import Any

from jobrun import validate
from jobrun.errors import InvalidInput

SETTINGS = ("concurrency", "rate", "aging", "priority_default", "max_attempts", "retention",
            "key_concurrency")
CLEARABLE = {"concurrency", "rate", "aging", "max_attempts", "retention"}
MAX_COUNT = 1_000_000          # concurrency, key_concurrency and a rate's count
AGING_MIN, AGING_MAX = 0.001, 365 * 86400.0
RETENTION_MIN, RETENTION_MAX = 0.001, 100 * 366 * 86400.0
NONE_WORDS = ("none", "off", "null")


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise InvalidInput(f"invalid {name} {validate._show(value)}: an integer from 1 to {MAX_COUNT}")
    return value


def _interval(name: str, value: Any, low: float, high: float, example: str) -> float:
    try:
        secs = validate.duration(value)
    except InvalidInput:
        raise InvalidInput(f"invalid {name} {validate._show(value)}: a duration, e.g. {example}") from None
    if not low <= secs <= high:
        raise InvalidInput(f"invalid {name} {validate._show(value)}: from {low:g}s to {high:g}s")
    return round(secs, 6)  # PostgreSQL keeps microseconds


def _rate(value: Any) -> tuple[int, float]:
    if isinstance(value, (tuple, list)) and len(value) == 2:
        count, period = value
        _count("rate", count)
        if (isinstance(period, bool) or not isinstance(period, (int, float))
                or not math.isfinite(period) or not 0 < period <= validate.MAX_RATE_PERIOD):
            raise InvalidInput(f"invalid rate period {validate._show(period)}: seconds, over 0"
                               " and at most 86400")
        return count, round(float(period), 6)
    count, period = validate.rate(value)
    if count > MAX_COUNT:
        raise InvalidInput(f"invalid rate {validate._show(value)}: at most {MAX_COUNT} per period")
    return count, round(period, 6)


def _one(name: str, value: Any) -> Any:
    if value is None:
        if name not in CLEARABLE:
            raise InvalidInput(f"invalid {name} None: {name} cannot be unset")
        return None
    if name in ("concurrency", "key_concurrency"):
        return _count(name, value)
    if name == "rate":
        return _rate(value)
    if name == "aging":
        return _interval("aging", value, AGING_MIN, AGING_MAX, "30s, 5m or 1h")
    if name == "retention":
        return _interval("retention", value, RETENTION_MIN, RETENTION_MAX, "7d or 12h")
    if name == "priority_default":
        return validate.priority(value)
    return validate.max_attempts(value)


def check(changes: dict[str, Any]) -> dict[str, Any]:
    """The given settings, checked and normalised (rate as (count, seconds), intervals as
    seconds); names not in SETTINGS are refused."""
    unknown = sorted(set(changes) - set(SETTINGS))
    if unknown:
        raise InvalidInput(f"unknown queue setting {unknown[0]!r}: one of {', '.join(SETTINGS)}")
    return {name: _one(name, value) for name, value in changes.items()}


def from_text(name: str, text: str) -> Any:
    """A setting as given on the command line: 'none' clears it; counts are integers."""
    if text.strip().lower() in NONE_WORDS:
        return None
    if name in ("concurrency", "key_concurrency", "priority_default", "max_attempts"):
        try:
            return int(text.strip())
        except ValueError:
            raise InvalidInput(f"invalid {name} {validate._show(text)}: an integer") from None
    return text


def params(checked: dict[str, Any]) -> dict[str, Any]:
    """SQL parameters of a change: ``set_<name>`` says whether the change sets the setting."""
    out: dict[str, Any] = {}
    for name in SETTINGS:
        given = name in checked
        value = checked.get(name)
        out[f"set_{name}"] = given
        if name == "rate":
            out["rate_limit"], out["rate_period"] = value if value else (None, None)
        else:
            out[name] = value
    return out


def differs(checked: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """The given settings a stored queue (as queue views show it) does not have."""
    def stored(name: str) -> Any:
        if name == "rate":
            return None if row["rate_limit"] is None else (row["rate_limit"], row["rate_period"])
        return row[name]

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, tuple) and isinstance(b, tuple):
            return a[0] == b[0] and math.isclose(a[1], b[1], abs_tol=1e-6)
        if isinstance(a, float) and isinstance(b, (int, float)):
            return math.isclose(a, b, abs_tol=1e-6)
        return a == b

    return [n for n, v in checked.items() if not same(v, stored(n))]
