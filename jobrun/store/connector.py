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

- following the primary (docs/operations.md, "Failover"): a DSN naming several hosts gets
  ``target_session_attrs=read-write`` (``db.follow_primary``), so a new connection lands on
  whichever host takes writes. A connection opened before the switch may still be open on a
  host that became read-only: a statement refused read-only (SQLSTATE 25006) reported through
  ``failed`` makes every connection opened before it stale, and the seam replaces each at its
  next use (``Session.get``, ``reconnect``), logging ``db.read_only`` once per connection with
  its host. So no part claims, renews or completes there.
- the server: each new connection's host:port goes to ``DbHealth`` (``jobrun health``, the
  registry); when someone listens (``watch_server``: the master, which then changes its
  owner id), each new connection also asks which server it reached (cluster and timeline): a
  different primary than the last one is announced once, before the connection is handed out.

tests/fakedb.py has a ``FakeConnector`` whose connections are scripted, for unit tests.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import psycopg

from jobrun.logs import event
from jobrun.store import db

log = logging.getLogger("jobrun.db")

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
    host: str | None = None  # host:port of the last connection opened

    def as_dict(self) -> dict[str, Any]:
        """The fields of /healthz."""
        return {"seconds_since_db": round(self.seconds_since_ok, 3), **self.as_row()}

    def as_row(self) -> dict[str, Any]:
        """The columns of the master's registry row (worker/registry.py)."""
        return {"db_failures": self.failures, "db_error": self.error, "db_host": self.host}


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
        self.host: str | None = None

    def connected(self, host: str | None) -> None:
        """A new connection was opened to ``host`` (host:port)."""
        with self._lock:
            self.host = host

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
            return HealthReport(max(0.0, self.clock() - self.last_ok), self.failures, self.error,
                                self.host)


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


def where(conn: Any) -> str | None:
    """host:port of a connection (a Unix socket's folder as its host), None if unknown."""
    info = getattr(conn, "info", None)
    try:
        return f"{info.host}:{info.port}" if info is not None else None
    except Exception:  # noqa: BLE001 - a closed connection has no address left
        return None


class Connector:
    """The DSN, the profiles, backoff and the health state of one master (see the module
    docstring). ``sleep`` and ``jitter`` (a number in [0, 1]) are injected by tests."""

    def __init__(self, dsn: str, *, health: DbHealth | None = None,
                 sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                 jitter: Callable[[], float] = random.random) -> None:
        self.dsn = db.follow_primary(dsn)
        self.health = health if health is not None else DbHealth(dsn=self.dsn)
        self._sleep = sleep
        self._jitter = jitter
        self._lock = threading.Lock()  # the heartbeater connects from its own thread
        self._refusals = 0  # statements refused read-only, so far
        self._born: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.server: str | None = None  # the primary last reached (cluster:timeline)
        self._identity: str | None = None  # the query that says so (sql: server_identity)
        self.on_new_server: Callable[[str, str], None] | None = None

    def watch_server(self, identity_query: str, on_new_server: Callable[[str, str], None]) -> None:
        """Ask each new connection which server it reached (``identity_query``), and call
        ``on_new_server(previous, new)`` when it is another primary than the last one: in the
        connecting thread, before that connection is handed out (one round trip a connect)."""
        self._identity, self.on_new_server = identity_query, on_new_server

    @classmethod
    def of(cls, target: "Connector | str | None") -> "Connector":
        """``target`` if it is a Connector, else one of its own for that DSN (a part made
        outside a master, as in tests)."""
        return target if isinstance(target, Connector) else cls(target)  # type: ignore[arg-type]

    # --- health ---------------------------------------------------------------------------

    def succeeded(self) -> None:
        self.health.succeeded()

    def failed(self, exc: BaseException) -> None:
        if db.read_only(exc):
            with self._lock:
                self._refusals += 1
        self.health.failed(exc)

    # --- which server -----------------------------------------------------------------------

    def usable(self, conn: Any) -> bool:
        """Whether ``conn`` may still be used: open, not broken, and not opened before a
        statement was refused read-only (then it is logged, once, and must be replaced)."""
        if not db.usable(conn):
            return False
        with self._lock:
            born = self._born.get(conn)
            stale = born is not None and born < self._refusals
            if stale:
                del self._born[conn]
        if stale:
            event(log, logging.WARNING, "db.read_only", host=where(conn),
                  action="connection replaced: a statement was refused read-only")
        return not stale

    def _admitted(self, conn: Any, identity: str | None) -> None:
        with self._lock:
            self._born[conn] = self._refusals
            previous = self.server
            moved = bool(identity) and not identity.endswith(":") and identity != previous
            if moved:
                self.server = identity
        self.health.connected(where(conn))
        if moved and previous is not None and self.on_new_server is not None:
            event(log, logging.WARNING, "db.new_primary", host=where(conn), server=identity,
                  previous=previous)
            self.on_new_server(previous, identity)  # type: ignore[arg-type]

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
        return await self._new_async(self.options(profile), extra)

    async def reconnect(self, conn: psycopg.AsyncConnection | None,
                        profile: Profile = PLAIN) -> psycopg.AsyncConnection:
        """``conn`` while it is usable, else a new connection of ``profile``."""
        if self.usable(conn):
            return conn  # type: ignore[return-value]
        await _discard(conn)
        return await self.connect(profile)

    def connect_sync(self, profile: Profile = PLAIN, settings: dict[str, str] | None = None,
                     **extra: Any) -> psycopg.Connection:
        """A new blocking connection (the heartbeater's thread); ``settings``: server settings
        added to the profile's; ``extra``: more connect arguments (connect_timeout)."""
        return self._new_sync(self.options(profile, settings), extra)

    async def _new_async(self, options: dict[str, Any], extra: dict[str, Any]):
        conn = await self._open_async(options, extra)
        identity = None
        if self._identity is not None:
            try:
                cur = await conn.execute(self._identity)
                identity = (await cur.fetchone())["identity"]
            except BaseException:
                await _discard(conn)
                raise
        self._admitted(conn, identity)
        return conn

    def _new_sync(self, options: dict[str, Any], extra: dict[str, Any]):
        conn = self._open_sync(options, extra)
        identity = None
        if self._identity is not None:
            try:
                identity = conn.execute(self._identity).fetchone()["identity"]
            except BaseException:
                conn.close()
                raise
        self._admitted(conn, identity)
        return conn

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
        if not self.connector.usable(self.conn):
            await _discard(self.conn)
            self.conn = None
            self.conn = await self.connector._new_async(
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
        """Whether the connection may be used again: open, not broken, and not opened before
        a read-only refusal (the heartbeater then drops it and retries at once, as after a
        dropped connection)."""
        return self.connector.usable(self.conn)

    def get(self, settings: dict[str, str] | None = None, **extra: Any) -> psycopg.Connection:
        if not self.connector.usable(self.conn):
            self.drop()
            self.conn = self.connector.connect_sync(self.profile, settings, **extra)
        return self.conn  # type: ignore[return-value]

    def drop(self) -> None:
        """Forget a connection that is broken or stale: the next ``get()`` opens a new one (a
        stale one, still open, is closed; a broken one is left to go)."""
        old, self.conn = self.conn, None
        if old is not None and not old.closed and not old.broken:
            try:
                old.close()
            except Exception:  # noqa: BLE001 - closing a connection being replaced
                pass

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


async def _discard(conn: Any) -> None:
    """Close a connection being replaced because it is stale (still open and working); a
    broken one is left to go, as it always was."""
    if conn is not None and not conn.closed and not conn.broken:
        try:
            await conn.close()
        except Exception:  # noqa: BLE001 - closing a connection being replaced
            pass
