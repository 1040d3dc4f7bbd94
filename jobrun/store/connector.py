"""The master's one way to PostgreSQL: connection profiles, reconnects, backoff, and one
database-health state.

Every long-lived part of a master (notifier, claimer, completer, heartbeater, scheduler,
reaper, aging sweeper, registry) holds a connection of its own, since each runs its own kind
of statement at its own pace; what they share is this ``Connector``:

- the DSN, and each kind of connection's session options (``Profile``): the claimer's and the
  completer's statements are prepared at first use, the completer's and the heartbeat's look
  rows up by id (``db.BY_ID_SETTINGS``); the others take psycopg's defaults. A part asks for
  its profile and never spells options out.
- reconnecting: a part keeps its connection in a ``Session`` (``SyncSession`` in the
  heartbeater's thread), whose ``get()`` hands the connection back while it is usable and
  opens a new one once it broke: a broken connection is replaced at its next use.
- backoff between retries: ``backoff(failures, jitter)`` is a pure function (exponential,
  capped, with jitter so that the masters of a cluster do not all come back in the same
  instant after a database restart); ``pause()`` sleeps it.
- ``DbHealth``: the last good round trip (monotonic clock), the consecutive failures, the
  last error's first line (redacted: no password). Every part reports to the master's one
  instance, from the event loop or from the heartbeater's thread; /healthz (so
  ``jobrun health``) and the master's registry row read it.

tests/fakedb.py has a ``FakeConnector`` whose connections are scripted, for unit tests.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import psycopg

from jobrun.store import db

BASE = 0.1  # seconds: the first retry's ceiling is 2 * BASE
CAP = 5.0  # seconds: no retry waits longer (unless a part asks for a smaller cap)
MAX_DOUBLINGS = 60  # a bound on the exponent alone: past any cap, and no float overflow


def backoff_ceiling(failures: int, base: float = BASE, cap: float = CAP) -> float:
    """The most a retry after ``failures`` consecutive failures waits: doubling, capped."""
    return min(cap, base * 2 ** min(max(failures, 0), MAX_DOUBLINGS))


def backoff(failures: int, jitter: float, base: float = BASE, cap: float = CAP) -> float:
    """Seconds to wait before the next try, after ``failures`` consecutive failures.
    ``jitter`` in [0, 1] picks a point in the upper half of the ceiling ("equal jitter"):
    spread enough that masters retrying together drift apart, never less than half the
    ceiling, so the wait still grows with the failures."""
    ceiling = backoff_ceiling(failures, base, cap)
    return ceiling * (0.5 + 0.5 * min(1.0, max(0.0, jitter)))


@dataclass(frozen=True)
class HealthReport:
    seconds_since_ok: float  # since the last good round trip (or since the state was made)
    failures: int  # consecutive failures since then
    error: str | None  # the last failure's first line, redacted

    def as_dict(self) -> dict[str, Any]:
        """The fields of /healthz."""
        return {"seconds_since_db": round(self.seconds_since_ok, 3), **self.as_row()}

    def as_row(self) -> dict[str, Any]:
        """The columns of the master's registry row (worker/registry.py)."""
        return {"db_failures": self.failures, "db_error": self.error}


class DbHealth:
    """Whether the database answers this master, as all its parts together saw it.
    Thread-safe: the heartbeater reports from its own thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, dsn: str | None = None) -> None:
        self.clock = clock
        self._dsn = dsn
        self._lock = threading.Lock()
        self.last_ok = clock()  # a master starts out trusted (it connected to start)
        self.failures = 0
        self.error: str | None = None

    def succeeded(self) -> None:
        """A round trip to the database just succeeded."""
        with self._lock:
            self.last_ok = self.clock()
            self.failures = 0

    def failed(self, exc: BaseException) -> None:
        """A connect or a statement failed with ``exc``."""
        line = db.error_line(exc, self._dsn)
        with self._lock:
            self.failures += 1
            self.error = line

    def report(self) -> HealthReport:
        with self._lock:
            return HealthReport(max(0.0, self.clock() - self.last_ok), self.failures, self.error)


@dataclass(frozen=True)
class Profile:
    """The session options of one kind of connection."""
    name: str
    prepared: bool = False  # prepare_threshold=0: every statement prepared at its first run
    settings: dict[str, str] = field(default_factory=dict)  # server settings (-c name=value)


PLAIN = Profile("plain")  # the notifier, the scheduler, the periodic services
CLAIMS = Profile("claims", prepared=True)
COMPLETIONS = Profile("completions", prepared=True, settings=db.BY_ID_SETTINGS)
HEARTBEATS = Profile("heartbeats", settings=db.BY_ID_SETTINGS)  # + statement_timeout per connect


class Connector:
    """The DSN, the profiles, backoff and the health state of one master (see the module
    docstring). ``sleep`` and ``jitter`` (a number in [0, 1]) are injected by tests."""

    def __init__(self, dsn: str, *, health: DbHealth | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 jitter: Callable[[], float] = random.random) -> None:
        self.dsn = dsn
        self.health = health if health is not None else DbHealth(dsn=dsn)
        self._sleep = sleep
        self._jitter = jitter

    @classmethod
    def of(cls, target: "Connector | str | None") -> "Connector":
        """``target`` if it is a Connector, else one of its own for that DSN (a part made
        outside a master, as in tests)."""
        return target if isinstance(target, Connector) else cls(target)  # type: ignore[arg-type]

    # --- health ---------------------------------------------------------------------------

    def succeeded(self) -> None:
        self.health.succeeded()

    def failed(self, exc: BaseException) -> None:
        self.health.failed(exc)

    async def pause(self, failures: int, cap: float = CAP) -> None:
        """Wait before retrying after ``failures`` consecutive failures (a retry pause, not
        synchronisation)."""
        await self._sleep(backoff(failures, self._jitter(), cap=cap))

    # --- connections ----------------------------------------------------------------------

    def options(self, profile: Profile, settings: dict[str, str] | None = None) -> dict[str, Any]:
        """psycopg connect arguments for ``profile`` (``settings``: more server settings)."""
        kwargs: dict[str, Any] = {"prepare_threshold": 0} if profile.prepared else {}
        every = {**profile.settings, **(settings or {})}
        if every:
            kwargs["options"] = db.session_options(self.dsn, every)
        return kwargs

    async def connect(self, profile: Profile = PLAIN, **extra: Any) -> psycopg.AsyncConnection:
        """A new connection of ``profile`` (a failure raises: the caller reports it, with its
        log event and its metric, through ``failed``)."""
        return await self._open_async(self.options(profile), extra)

    async def reconnect(self, conn: psycopg.AsyncConnection | None,
                        profile: Profile = PLAIN) -> psycopg.AsyncConnection:
        """``conn`` while it is usable, else a new connection of ``profile``."""
        return conn if db.usable(conn) else await self.connect(profile)  # type: ignore[return-value]

    def connect_sync(self, profile: Profile = PLAIN, settings: dict[str, str] | None = None,
                     **extra: Any) -> psycopg.Connection:
        """A new blocking connection (the heartbeater's thread); ``settings``: server settings
        added to the profile's; ``extra``: more connect arguments (connect_timeout)."""
        return self._open_sync(self.options(profile, settings), extra)

    async def _open_async(self, options: dict[str, Any], extra: dict[str, Any]):
        return await db.connect_async(self.dsn, **options, **extra)

    def _open_sync(self, options: dict[str, Any], extra: dict[str, Any]):
        return db.connect(self.dsn, **options, **extra)

    def session(self, profile: Profile = PLAIN) -> "Session":
        return Session(self, profile)

    def sync_session(self, profile: Profile = PLAIN) -> "SyncSession":
        return SyncSession(self, profile)


class Session:
    """One part's connection on the event loop: ``get()`` gives it back while it is usable
    and replaces it once it broke; ``close()`` at the part's end."""

    def __init__(self, connector: Connector, profile: Profile = PLAIN) -> None:
        self.connector = connector
        self.profile = profile
        self.conn: psycopg.AsyncConnection | None = None

    async def get(self, settings: dict[str, str] | None = None) -> psycopg.AsyncConnection:
        """The connection; a new one if it broke, with ``settings`` (server settings added to
        the profile's, chosen at each connect: a statement timeout that follows a lease)."""
        if not db.usable(self.conn):
            self.conn = await self.connector._open_async(
                self.connector.options(self.profile, settings), {})
        return self.conn  # type: ignore[return-value]

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                await conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass


class SyncSession:
    """A Session for a thread (the heartbeater): blocking connects, with server settings and
    a connect timeout chosen at each connect."""

    def __init__(self, connector: Connector, profile: Profile = PLAIN) -> None:
        self.connector = connector
        self.profile = profile
        self.conn: psycopg.Connection | None = None

    @property
    def usable(self) -> bool:
        return db.usable(self.conn)

    def get(self, settings: dict[str, str] | None = None, **extra: Any) -> psycopg.Connection:
        if not db.usable(self.conn):
            self.conn = self.connector.connect_sync(self.profile, settings, **extra)
        return self.conn  # type: ignore[return-value]

    def drop(self) -> None:
        """Forget a broken connection: the next ``get()`` opens a new one."""
        self.conn = None

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
