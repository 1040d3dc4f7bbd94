"""Exceptions: what producers and admins see, and what handlers raise or receive.

Producer/admin errors all derive from :class:`JobrunError`; the CLI maps them to exit codes
(1 for not found / conflict / refused). Handler-side signals (:class:`Permanent`,
:class:`Retry`) are raised *by* handlers; :class:`LeaseLost`, :class:`Cancelled` and
:class:`SoftTimeLimit` are raised *into* handlers by the child runtime.
"""

from __future__ import annotations


class JobrunError(Exception):
    """Base class of every error jobrun reports to a producer or an operator."""


class InvalidInput(JobrunError, ValueError):
    """The request itself is wrong (bad name, payload, range); nothing was changed."""


class UnknownQueue(InvalidInput):
    """The queue is not declared in the queues table."""


class Conflict(JobrunError):
    """The request contradicts stored state (e.g. an idempotency key reused with another body)."""


class StaleVersion(Conflict):
    """The job's version is not the one the caller expected (``if_version``); ``current`` is
    the job as it is now."""

    def __init__(self, message: str, current: object) -> None:
        super().__init__(message)
        self.current = current


class NotFound(JobrunError):
    """No job (or queue) with that identity."""


class Refused(JobrunError):
    """The job exists but is not in a state that allows the operation."""


class DatabaseUnavailable(JobrunError):
    """PostgreSQL could not be reached; the message names host and port, never the password."""


# --- raised by handlers -------------------------------------------------------------------

class Permanent(Exception):
    """Raise from a handler to fail the job without further retries (it ends ``dead``)."""


class Retry(Exception):
    """Raise from a handler to reschedule the job after ``delay`` seconds.

    The attempt is recorded with outcome ``retry`` (not a failure, no traceback). It still
    counts as a start: a job never starts more than ``max_attempts`` times.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay


# --- raised into handlers -----------------------------------------------------------------

class SoftTimeLimit(Exception):
    """The task's soft time limit passed; clean up and return or raise quickly."""


class LeaseLost(BaseException):
    """This attempt no longer owns its job; whatever it does next will not be recorded.

    A ``BaseException`` (like ``KeyboardInterrupt``) so that a broad ``except Exception``
    in a handler does not swallow the fence.
    """


class Cancelled(BaseException):
    """An operator cancelled this job while it ran; the job ends ``cancelled``."""
