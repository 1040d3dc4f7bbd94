"""Connections and database errors: the one place that turns psycopg errors into jobrun's."""

from __future__ import annotations

import psycopg
import psycopg.conninfo
from psycopg.rows import dict_row

from jobrun.redact import redact, redact_text
from jobrun.errors import (Conflict, DatabaseUnavailable, InvalidInput, JobrunError, NotFound,
                           UnknownQueue)

_CONSTRAINT_MESSAGES = {
    "task_name_valid": "invalid task name",
    "queue_name_valid": "invalid queue name",
    "priority_range": "priority out of range (-100 to 100)",
    "max_attempts_range": "max_attempts out of range (1 to 1000)",
    "idempotency_key_valid": "invalid idempotency key (1 to 255 characters)",
    "concurrency_positive": "concurrency must be positive",
    "schedule_name_valid": "invalid schedule name",
    "catch_up_valid": "catch_up must be latest, all or none",
    "window_ordered": "a schedule's window must end after it starts",
    "run_at_range": "run_at out of range: before year 10000 in UTC",
}

_SQLSTATE_ERRORS: dict[str, type[JobrunError]] = {
    "JR001": InvalidInput,
    "JR002": UnknownQueue,
    "JR003": Conflict,
    "JR004": InvalidInput,
    "JR005": NotFound,
}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def error_line(exc: BaseException, dsn: str | None = None) -> str:
    """The first line of ``exc``, fit for a log line or a health report: no password."""
    return redact_text(first_line(exc), dsn)


def translate(exc: psycopg.Error, dsn: str | None = None, schema: str | None = None) -> JobrunError:
    """Map a psycopg error to the jobrun error a user should read (never showing a password)."""
    error = _translate(exc, dsn, schema)
    return type(error)(redact_text(str(error), dsn))


def _translate(exc: psycopg.Error, dsn: str | None, schema: str | None) -> JobrunError:
    state = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    if state in _SQLSTATE_ERRORS:
        return _SQLSTATE_ERRORS[state](diag.message_primary if diag else first_line(exc))
    if state == "23514" and diag is not None:
        return InvalidInput(_CONSTRAINT_MESSAGES.get(diag.constraint_name or "", first_line(exc)))
    if state == "23502" and diag is not None:
        return InvalidInput(f"{diag.column_name} must not be null")
    if state in ("22P05", "22P02", "22021"):
        return InvalidInput(f"payload rejected by PostgreSQL: {first_line(exc)}")
    if state in ("42P01", "42883", "3F000"):
        where = f"schema {schema!r}" if schema else "the jobrun schema"
        return JobrunError(f"{where} is missing or out of date ({first_line(exc)}): run `jobrun migrate`")
    if isinstance(exc, psycopg.OperationalError):
        target = redact(dsn) if dsn else "the database"
        return DatabaseUnavailable(f"cannot reach PostgreSQL at {target}: {first_line(exc)}")
    return JobrunError(f"database error: {first_line(exc)}")


def read_only(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement refused because the server (or the transaction) is
    read-only: a replica, or a primary demoted while the connection was open (SQLSTATE 25006).
    The connection itself still works; it is on the wrong server."""
    return getattr(exc, "sqlstate", None) == "25006"


def follow_primary(dsn: str) -> str:
    """``dsn`` with ``target_session_attrs=read-write`` added when it names several hosts and
    says nothing of its own: libpq then tries the hosts in turn and keeps the one that takes
    writes, so a master follows a failover. A single-host DSN, one that already chooses, or one
    libpq cannot parse (its connect reports the error) is returned as given."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(dsn)
    except (psycopg.Error, AttributeError, TypeError):  # no DSN at all (a part in a unit test)
        return dsn
    if "," not in str(params.get("host") or params.get("hostaddr") or "") \
            or params.get("target_session_attrs"):
        return dsn
    return psycopg.conninfo.make_conninfo(dsn, target_session_attrs="read-write")


def pooled_options(pooled: bool) -> dict:
    """Connection options for a DSN that goes through a transaction pooler (PgBouncer in
    transaction mode): no server-side prepared statements, since the next transaction may
    run on another server connection that never saw them."""
    return {"prepare_threshold": None} if pooled else {}


# Settings for the master's connections that update jobs by id in batches (the completer's,
# the heartbeat's; each runs that one statement). Their statements are prepared, and
# PostgreSQL keeps the generic plan it settled on until the table's statistics change. Made
# while `jobs` was a few pages (a new schema, or one a purge emptied), that plan read the
# batch's rows with a sequential scan, and went on scanning the growing table until the next
# ANALYZE: a completion of 1.7 jobs took 2.0 ms instead of 0.55 at 300 jobs/s. Sequential
# scans are costed out of reach, so the rows are looked up by primary key at every size,
# and the plan is generic from the first execution: one plan, never re-made per batch
# (tests/db/test_completer.py, tests/db/test_plans.py).
BY_ID_SETTINGS = {"enable_seqscan": "off", "plan_cache_mode": "force_generic_plan"}


def session_options(dsn: str, settings: dict[str, str]) -> str:
    """The libpq ``options`` for ``dsn`` with ``settings`` added (``-c name=value`` each),
    keeping any the DSN already gives. A DSN libpq cannot parse gets ``settings`` alone: the
    connection then fails, and that error is the one to report."""
    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn).get("options") or ""
    except psycopg.Error:
        given = ""
    return " ".join([given, *(f"-c {name}={value}" for name, value in settings.items())]).strip()


def connect(dsn: str, *, autocommit: bool = True, **kwargs) -> psycopg.Connection:
    """A connection to ``dsn`` (to its writable host, when it names several: follow_primary)."""
    try:
        return psycopg.connect(follow_primary(dsn), autocommit=autocommit, row_factory=dict_row, **kwargs)
    except psycopg.Error as exc:
        raise translate(exc, dsn) from None


async def connect_async(dsn: str, *, autocommit: bool = True, **kwargs) -> psycopg.AsyncConnection:
    try:
        return await psycopg.AsyncConnection.connect(follow_primary(dsn), autocommit=autocommit, row_factory=dict_row, **kwargs)
    except psycopg.Error as exc:
        raise translate(exc, dsn) from None


def usable(conn: psycopg.Connection | psycopg.AsyncConnection | None) -> bool:
    """Whether a connection may still be used (open and not broken)."""
    return conn is not None and not conn.closed and not conn.broken


def reconnect(conn: psycopg.Connection | None, dsn: str, **kwargs) -> psycopg.Connection:
    """``conn`` if it is usable, else a new connection (kwargs go to connect)."""
    return conn if usable(conn) else connect(dsn, **kwargs)  # type: ignore[return-value]


async def reconnect_async(conn: psycopg.AsyncConnection | None, dsn: str,
                          **kwargs) -> psycopg.AsyncConnection:
    """``conn`` if it is usable, else a new connection (kwargs go to connect_async)."""
    return conn if usable(conn) else await connect_async(dsn, **kwargs)  # type: ignore[return-value]
