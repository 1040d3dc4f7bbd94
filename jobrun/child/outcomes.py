"""What a handler's return or exception becomes: the outcome fields of a result frame. One
mapping for a job run alone (runtime.py) and one run in a slot (slots.py)."""

from __future__ import annotations

import traceback
from typing import Any

from jobrun import validate
from jobrun.errors import Cancelled, InvalidInput, LeaseLost, Permanent, Retry, SoftTimeLimit
from jobrun.policy import CANCELLED, FAILED, RETRY, SUCCEEDED, TIMEOUT

LEASE_LOST = "lease_lost"  # reported to the master, which discards the attempt
MAX_TRACEBACK = 16 * 1024


class HardTimeLimit(Exception):
    """The master's hard time limit for a job in a slot passed: it stops now, or its child is
    killed (and the child's other jobs released)."""


INTERRUPTS = (LeaseLost, Cancelled, SoftTimeLimit, HardTimeLimit)


def returned(value: Any) -> dict[str, Any]:
    try:
        return {"outcome": SUCCEEDED, "result": validate.result(value)}
    except InvalidInput as exc:
        return {"outcome": FAILED, "error": f"handler returned {exc}"}


def interrupted(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, LeaseLost):
        return {"outcome": LEASE_LOST}
    if isinstance(exc, Cancelled):
        return {"outcome": CANCELLED, "error": "cancelled while running"}
    if isinstance(exc, HardTimeLimit):
        return {"outcome": TIMEOUT, "error": "hard time limit exceeded; the job stopped"}
    return {"outcome": TIMEOUT, "error": "soft time limit exceeded",
            "traceback": traceback.format_exc()[-MAX_TRACEBACK:]}


def failure(exc: BaseException, permanent: bool = False) -> dict[str, Any]:
    try:
        text = str(exc)
    except BaseException as err:  # noqa: BLE001 - a handler's exception may not print
        text = f"<exception str() failed: {type(err).__name__}>"
    line = f"{type(exc).__name__}: {text}".strip()
    try:
        trace = traceback.format_exc()
    except BaseException:  # noqa: BLE001 - nor format
        trace = ""
    return {"outcome": FAILED, "permanent": permanent, "error": line[:2000],
            "traceback": trace[-MAX_TRACEBACK:]}


def raised(exc: BaseException) -> dict[str, Any]:
    """The outcome of a handler that raised ``exc`` (call it in the ``except`` block: the
    traceback is the one being handled)."""
    if isinstance(exc, Retry):
        return {"outcome": RETRY, "delay": exc.delay, "error": str(exc)}
    if isinstance(exc, INTERRUPTS):
        return interrupted(exc)
    if isinstance(exc, Permanent):
        return failure(exc, permanent=True)
    return failure(exc)
