"""Input validation: pure functions, no I/O. Every check raises InvalidInput with one clear line.

The same rules are enforced again inside PostgreSQL (the domains of the jobs columns, CHECK
constraints on the other tables, and the SQL ``enqueue`` functions), so producers in other languages get them too; these Python checks
exist to fail early, without a round trip, with a message that names the offending value.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from typing import Any

from jobrun.errors import InvalidInput

TASK_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")
QUEUE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# The schema name also forms the NOTIFY channel "<schema>_ready" (63 bytes at most).
SCHEMA_RE = re.compile(r"[a-z_][a-z0-9_]{0,50}")
KEY_MAX = 255
PRIORITY_MIN, PRIORITY_MAX = -100, 100
MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX = 1, 1000
# PostgreSQL's bigint (ids, versions, cursors) and integer (attempt numbers): a Python int past
# them would reach the database and come back as "bigint out of range".
BIGINT_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# JSON shape limits, for payloads and results alike (the SQL enqueue functions check the same
# numbers): containers nested at most MAX_DEPTH deep (Python's parser gives up near 1,000,
# PostgreSQL's jsonb accepts far more), integers of at most MAX_NUMBER_DIGITS digits (Python
# refuses to convert longer ones: sys.get_int_max_str_digits(); PostgreSQL writes 1e5000 as
# an integer of 5,001 digits, so the SQL functions refuse any number of that magnitude).
MAX_DEPTH = 100
MAX_NUMBER_DIGITS = 4300
# Times (run_at, now + delay) stay before year 10000: PostgreSQL stores far later ones, but
# neither Python nor JSON clients read them back. A delay is at most MAX_DELAY seconds.
MAX_DELAY = 100 * 366 * 86400.0

TASK_RULE = "a letter or _, then letters, digits, '_', '.', ':' or '-'; at most 200 characters"
QUEUE_RULE = "a letter or digit, then letters, digits, '_', '.' or '-'; at most 63 characters"
SCHEMA_RULE = "lower-case letters, digits and '_', not starting with a digit; at most 51 characters"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def task_name(name: Any) -> str:
    if not isinstance(name, str) or not TASK_RE.fullmatch(name):
        raise InvalidInput(f"invalid task name {_show(name)}: {TASK_RULE}")
    return name


def queue_name(name: Any) -> str:
    if not isinstance(name, str) or not QUEUE_RE.fullmatch(name):
        raise InvalidInput(f"invalid queue name {_show(name)}: {QUEUE_RULE}")
    return name


def schema_name(name: Any) -> str:
    if not isinstance(name, str) or not SCHEMA_RE.fullmatch(name):
        raise InvalidInput(f"invalid schema name {_show(name)}: {SCHEMA_RULE}")
    return name


def integer(what: str, value: Any, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) from ``low`` to ``high``; else InvalidInput
    naming ``what`` (its first words name the field: "invalid version ...")."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"invalid {what} {_show(value)}: an integer from {low} to {high}")
    return value


def version(value: Any) -> int | None:
    """An expected version (None: unguarded): a bigint, from 0."""
    return None if value is None else integer("version", value, 0, BIGINT_MAX)


def job_id(value: Any, what: str = "job id") -> int:
    """A job id, or a position in the id order (``before``): a bigint, from 1."""
    return integer(what, value, 1, BIGINT_MAX)


def attempt_number(value: Any) -> int:
    return integer("attempt", value, 1, INT_MAX)


def page_size(value: Any, high: int) -> int:
    """How many rows a list returns (its ``limit``): from 1 to ``high``."""
    return integer("limit", value, 1, high)


def priority(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (
        PRIORITY_MIN <= value <= PRIORITY_MAX
    ):
        raise InvalidInput(
            f"invalid priority {_show(value)}: an integer from {PRIORITY_MIN} to {PRIORITY_MAX}"
            " (lower runs first)"
        )
    return value


def max_attempts(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not (
        MAX_ATTEMPTS_MIN <= value <= MAX_ATTEMPTS_MAX
    ):
        raise InvalidInput(
            f"invalid max_attempts {_show(value)}: an integer from {MAX_ATTEMPTS_MIN}"
            f" to {MAX_ATTEMPTS_MAX}"
        )
    return value


def idempotency_key(value: Any) -> str | None:
    if value is None:
        return None
    if (not isinstance(value, str) or not value or len(value) > KEY_MAX or "\x00" in value
            or not (value.isascii() or _utf8_ok(value))):
        raise InvalidInput(
            f"invalid idempotency key {_show(value)}: 1 to {KEY_MAX} characters, no NUL"
        )
    return value


CONCURRENCY_KEY_MAX = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def concurrency_key(value: Any) -> str | None:
    """A job's concurrency key ("customer:42"): 1 to 200 characters, no control characters
    (the SQL functions and the column's domain hold the same rule)."""
    if value is None:
        return None
    if (not isinstance(value, str) or not value or len(value) > CONCURRENCY_KEY_MAX
            or _CONTROL.search(value) or not (value.isascii() or _utf8_ok(value))):
        raise InvalidInput(f"invalid concurrency key {_show(value)}: 1 to {CONCURRENCY_KEY_MAX}"
                           " characters, no control characters")
    return value


def _utf8_ok(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _has_nul(obj: Any) -> bool:
    if isinstance(obj, str):
        return "\x00" in obj
    if isinstance(obj, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return any(_has_nul(v) for v in obj)
    return False


def escape_surrogates(text: str) -> str:
    """Text made valid UTF-8: a lone surrogate (os.listdir's escape for an undecodable byte)
    is written as its backslash escape."""
    return text.encode("utf-8", "backslashreplace").decode()


def _too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _check_depth(text: str, obj: Any, what: str) -> None:
    # Counting brackets in the text is fast; only a text with enough of them needs the walk.
    if text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(obj):
        raise InvalidInput(f"{what} nested deeper than {MAX_DEPTH} levels")


def _encode_checked(obj: Any, what: str) -> str:
    try:
        text = _encode(obj)
    except RecursionError:
        raise InvalidInput(f"{what} nested deeper than {MAX_DEPTH} levels") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from None
    _check_depth(text, obj, what)
    return text


def result(value: Any) -> str:
    """Encode a handler's return value to the JSON text stored as the attempt's result."""
    text = _encode_checked(value, "a value")
    if "\\u0000" in text and _has_nul(value):
        raise InvalidInput("a value holding a NUL character")
    if not text.isascii() and not _utf8_ok(text):
        raise InvalidInput("a value holding a lone surrogate, which is not valid UTF-8")
    return text


def _check_encoded(text: str, obj: Any, limit: int) -> str:
    # json.dumps writes NUL as \u0000; only then is the (slower) walk needed to tell a real
    # NUL from an escaped backslash followed by "u0000".
    if "\\u0000" in text and _has_nul(obj):
        raise InvalidInput(
            "payload holds a NUL character (\\u0000), which PostgreSQL jsonb cannot store"
        )
    try:
        size = len(text.encode()) if not text.isascii() else len(text)
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"payload holds {text[exc.start:exc.end]!r}, a lone surrogate that is not valid UTF-8"
        ) from None
    # The cap is on the JSON text as PostgreSQL renders jsonb (what the SQL functions measure),
    # with a space after each ',' and ':' between values; that form is only built near the cap.
    if size <= limit < size + text.count(",") + text.count(":"):
        size = len(json.dumps(obj, ensure_ascii=False, allow_nan=False).encode())
    if size > limit:
        raise InvalidInput(f"payload is {size} bytes, over the limit of {limit} bytes")
    return text


# json.dumps with these options builds a new encoder on every call; bulk enqueue calls this
# once per job.
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def payload(obj: Any, limit: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Encode a Python payload to the JSON text stored in jobs.payload."""
    return _check_encoded(_encode_checked(obj, "payload"), obj, limit)


def payload_text(text: str, limit: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """Check JSON text given by a user (the CLI) and return it normalised."""
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"payload is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput(f"payload nested deeper than {MAX_DEPTH} levels") from None
    return payload(obj, limit)


def _parse_int(number: str) -> int:
    # Only integers fail to convert; a float too large becomes inf, refused when encoded.
    if len(number.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise InvalidInput(f"payload holds a number of more than {MAX_NUMBER_DIGITS} digits")
    return int(number)


def _reject_constant(name: str) -> Any:
    raise InvalidInput(f"payload is not valid JSON: {name} is not a JSON value")


def delay(value: Any) -> float:
    """A delay in seconds (see ``duration``), at most MAX_DELAY."""
    secs = duration(value)
    if secs > MAX_DELAY:
        raise InvalidInput(f"invalid delay {_show(value)}: at most 100 years")
    return secs


def run_at(value: Any) -> datetime:
    """A timezone-aware datetime that is a valid time in UTC (before year 10000)."""
    if not isinstance(value, datetime):
        raise InvalidInput(f"run_at must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput("run_at must be timezone-aware (naive datetimes are ambiguous)")
    try:
        value.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidInput(f"run_at {value.isoformat()} is out of range: from year 1 to 9999 in UTC") from None
    return value


_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration(text: Any) -> float:
    """Parse '30s', '5m', '1h30m', '7d', '250ms' or a bare number of seconds; return seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    elif isinstance(text, str):
        s = text.strip().lower()
        try:
            value = float(s)
        except ValueError:
            pos, value = 0, 0.0
            for m in _DURATION_RE.finditer(s):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * _UNIT[m.group(2)]
                pos = m.end()
            if pos != len(s) or not s:
                raise InvalidInput(
                    f"invalid duration {_show(text)}: use e.g. 30s, 5m, 1h30m, 7d or 250ms"
                ) from None
    else:
        raise InvalidInput(f"invalid duration {_show(text)}")
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(f"invalid duration {_show(text)}: must be a finite number >= 0")
    return value


def schedule_name(name: Any) -> str:
    """A schedule's name follows the task name rule (a declared schedule defaults to its task's)."""
    if not isinstance(name, str) or not TASK_RE.fullmatch(name):
        raise InvalidInput(f"invalid schedule name {_show(name)}: {TASK_RULE}")
    return name


_RATE_RE = re.compile(r"\s*(\d{1,9})\s*/\s*(\S+)\s*")
MAX_RATE_PERIOD = 86400.0  # a rate is counted over at most a day


def rate(text: Any) -> tuple[int, float]:
    """Parse a rate '50/s', '1000/m', '10/h', '5/2s' or '3/250ms': (count, period seconds).

    The period is a duration with a unit ('s' alone means one second), more than zero and at
    most a day; the count an integer from 1."""
    m = _RATE_RE.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        raise InvalidInput(f"invalid rate {_show(text)}: COUNT/PERIOD, e.g. 50/s, 1000/m, 10/h, 5/2s")
    count, unit = int(m.group(1)), m.group(2).lower()
    try:
        period = duration(unit if unit[0].isdigit() else "1" + unit)
    except InvalidInput:
        period = -1.0
    if unit[-1].isdigit() or unit[0] == ".":
        period = -1.0  # a bare number: the unit is required
    if count < 1 or not 0 < period <= MAX_RATE_PERIOD:
        raise InvalidInput(f"invalid rate {_show(text)}: a count from 1 per a period with a unit,"
                           " over 0 and at most 1d, e.g. 50/s, 1000/m, 10/h, 5/2s")
    return count, period
