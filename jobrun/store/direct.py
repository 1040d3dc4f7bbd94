"""Prepared statements run on a connection's libpq handle, without psycopg's cursor.

The master runs two statements per job or two (the claim, the completion) at up to thousands
a second, each on a connection of its own. Through ``AsyncRawCursor`` a statement costs the
master ~105 µs of CPU besides PostgreSQL's own work: the cursor, its generators, and at every
wait a reader added to the event loop, a timer, a future, the reader removed. Run here the
same claim costs ~45 µs: its parameters are dumped by psycopg's own ``Transformer`` (the same
adapters, the same binary arrays), the statement goes out with ``send_query_prepared``, the
event loop wakes once when the answer is readable, and the rows are loaded by the same
``Transformer``. (docs/BENCHMARKS.md has the figures.)

Only for connections in autocommit mode, one statement at a time: each run holds the
connection's own lock, so psycopg's ``execute`` on the same connection (the claimer gives
rows back on its claim connection) waits for it, and it for them. A connection broken
underneath raises ``psycopg.OperationalError`` and reads as broken (``db.usable``), as with
psycopg's own calls; an error of the statement raises its psycopg error class and leaves the
connection usable.

``Statement.run`` is the same on a sync connection. The clients (sync and async) run their
operations this way on their own connection (never on one the caller passes, which may be in
a transaction of its own): a ``Client.enqueue`` costs its caller ~75 µs of CPU instead of
~105.
"""

from __future__ import annotations

import asyncio
import select
import weakref
from typing import Any, Sequence

import psycopg
from psycopg import errors, pq
from psycopg.adapt import PyFormat, Transformer

_OK = (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK)


class _OnConnection:
    """What one statement keeps per connection: its adapters, what it prepared there (by
    parameter types: psycopg dumps a None or an empty list with no type, so another call may
    need another plan), and the column names of its answer."""

    def __init__(self, conn: psycopg.Connection | psycopg.AsyncConnection) -> None:
        self.tx = Transformer(conn)
        self.prepared: dict[tuple[int, ...], bytes] = {}
        self.made = 0  # statements prepared so far: each gets a name of its own
        self.names: list[str] | None = None


class Statement:
    """One statement with numbered parameters ($1, $2, ...), prepared on each connection it
    runs on the first time it runs there, and run by :meth:`rows`."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text.encode()
        self._on: weakref.WeakKeyDictionary[psycopg.AsyncConnection, _OnConnection] = (
            weakref.WeakKeyDictionary())

    def _state(self, conn: Any) -> _OnConnection:
        on = self._on.get(conn)
        if on is None:
            on = self._on[conn] = _OnConnection(conn)
        return on

    async def rows(self, conn: psycopg.AsyncConnection, values: Sequence[Any]) -> list[dict[str, Any]]:
        """Run the statement on ``conn`` with ``values``; its rows as dicts."""
        return (await self.run_async(conn, values))[0]

    async def run_async(self, conn: psycopg.AsyncConnection, values: Sequence[Any],
                        then: Then | None = None) -> tuple[list[dict[str, Any]], int]:
        """Run the statement on ``conn`` with ``values``; its rows as dicts, and the rows it
        changed. ``then``: a statement and its values sent in the same round trip, run in a
        transaction of its own after this one's ends, whatever its outcome; its own outcome
        is ignored (see _steps)."""
        on = self._state(conn)
        async with conn.lock:
            steps = self._steps(conn, on, values, then)
            try:
                while True:
                    next(steps)
                    try:
                        await answer(conn)
                    except BaseException as exc:  # noqa: BLE001 - the steps decide, re-raise
                        steps.throw(exc)
            except StopIteration as done:
                result = done.value
        return _rows(on, result), result.command_tuples or 0

    def run(self, conn: psycopg.Connection, values: Sequence[Any],
            then: Then | None = None) -> tuple[list[dict[str, Any]], int]:
        """The same on a sync connection: its rows as dicts, and the rows it changed."""
        on = self._state(conn)
        with conn.lock:
            steps = self._steps(conn, on, values, then)
            try:
                while True:
                    next(steps)
                    try:
                        wait_sync(conn)
                    except BaseException as exc:  # noqa: BLE001 - the steps decide, re-raise
                        steps.throw(exc)
            except StopIteration as done:
                result = done.value
        return _rows(on, result), result.command_tuples or 0

    def _steps(self, conn: Any, on: _OnConnection, values: Sequence[Any], then: Then | None):
        """Send what is to send, yield while its answer is to be waited for (the caller waits,
        sync or async, and throws in what interrupted the wait), then read it. Returns the
        statement's result.

        With ``then``, the two go out together in libpq's pipeline mode, each followed by a
        sync: this statement commits (in autocommit mode) before the other starts, and the
        other runs even if this one failed. (The clients wake the masters this way right
        after an insert's commit, without a round trip of its own: migration 0011.)"""
        pgconn = conn.pgconn
        if pgconn.status != pq.ConnStatus.OK:
            raise psycopg.OperationalError("the connection is closed")
        dumped, types, formats = _dump(on, values)
        if then is not None:
            later, later_values = then
            later_on = later._state(conn)
            later_dumped, later_types, later_formats = _dump(later_on, later_values)
        try:
            for again in (True, False):
                prepared = yield from self._prepared(conn, on, types)
                if then is None:
                    pgconn.send_query_prepared(prepared, dumped, param_formats=formats)
                    yield
                    outcome = _outcome(conn, _take_sync(conn))
                else:
                    later_prepared = yield from later._prepared(conn, later_on, later_types)
                    pgconn.enter_pipeline_mode()
                    pgconn.send_query_prepared(prepared, dumped, param_formats=formats)
                    pgconn.pipeline_sync()
                    pgconn.send_query_prepared(later_prepared, later_dumped,
                                               param_formats=later_formats)
                    pgconn.pipeline_sync()
                    outcome = _outcome(conn, (yield from _take_piped(conn)))
                    if isinstance(_outcome(conn, (yield from _take_piped(conn))),
                                  errors.InvalidSqlStatementName):
                        later_on.prepared.clear()  # prepared again next time
                    pgconn.exit_pipeline_mode()
                if not isinstance(outcome, Exception):
                    return outcome
                if not isinstance(outcome, errors.InvalidSqlStatementName) or not again:
                    raise outcome
                # Deallocated behind its back (DEALLOCATE ALL, DISCARD ALL on the
                # connection): prepared again, once.
                on.prepared.clear()
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Interrupted with a statement in flight: its answer would be read as the next
            # one's. The connection is dropped (it reads as broken), not reused.
            pgconn.finish()
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _prepared(self, conn: Any, on: _OnConnection, types: tuple[int, ...]):
        """The name this statement is prepared under on ``conn`` for parameters of
        ``types``, preparing it first if it is not (yields while the answer is awaited)."""
        prepared = on.prepared.get(types)
        if prepared is None:
            on.made += 1
            prepared = f"jobrun_{self.name}_{on.made}".encode()
            conn.pgconn.send_prepare(prepared, self.text, param_types=types)
            yield
            outcome = _outcome(conn, _take_sync(conn))
            if isinstance(outcome, Exception):
                raise outcome
            on.prepared[types] = prepared
        return prepared


# A statement and its parameter values, run after another in the same round trip.
Then = tuple[Statement, Sequence[Any]]


def _dump(on: _OnConnection, values: Sequence[Any]) -> tuple[list[Any], tuple[int, ...], list[Any]]:
    """``values`` dumped by the statement's adapters: the values, their types, their formats."""
    tx = on.tx
    dumped = tx.dump_sequence(values, [PyFormat.AUTO] * len(values))
    return dumped, tuple(tx.types), list(tx.formats)


def _rows(on: _OnConnection, result: pq.abc.PGresult) -> list[dict[str, Any]]:
    tx = on.tx
    tx.set_pgresult(result)
    if not result.nfields:
        return []
    names = on.names
    if names is None or len(names) != result.nfields:
        names = on.names = [result.fname(i).decode() for i in range(result.nfields)]
    return tx.load_rows(0, result.ntuples, lambda values: dict(zip(names, values)))


async def answer(conn: psycopg.AsyncConnection) -> None:
    """Wait on the event loop until the statement just sent is answered."""
    pgconn = conn.pgconn
    while pgconn.flush():  # the statement is larger than the socket's buffer: rare
        await _ready(pgconn.socket, write=True)
    while True:
        pgconn.consume_input()  # a broken connection raises OperationalError here
        if not pgconn.is_busy():
            return
        await _ready(pgconn.socket)


def wait_sync(conn: psycopg.Connection) -> None:
    """Block until the statement just sent is answered."""
    pgconn = conn.pgconn
    while pgconn.flush():
        select.select([], [pgconn.socket], [])
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            return
        select.select([pgconn.socket], [], [])


def _take_sync(conn: Any) -> list[pq.abc.PGresult]:
    """The answer read, once it is all in (outside pipeline mode)."""
    pgconn = conn.pgconn
    results = []
    while (result := pgconn.get_result()) is not None:
        results.append(result)
    return results


def _take_piped(conn: Any):
    """In pipeline mode, the results of the next statement and the sync after it (yields
    while more is to be waited for)."""
    pgconn = conn.pgconn
    results = []
    while True:
        while pgconn.is_busy():
            yield
        result = pgconn.get_result()
        if result is None:
            break
        results.append(result)
    while pgconn.is_busy():
        yield
    pgconn.get_result()  # the sync's own result
    return results


def _outcome(conn: Any, results: list[pq.abc.PGresult]) -> pq.abc.PGresult | psycopg.Error:
    """A statement's result, or its first error as its psycopg class."""
    first = None
    for result in results:
        if first is None or first.status in _OK:
            first = result  # the first error, if any, is the one to report
    if first is None:  # pragma: no cover - libpq always answers a statement
        return psycopg.OperationalError("no answer to the statement")
    if first.status not in _OK:
        return errors.error_from_result(first, encoding=conn.info.encoding)
    return first


async def _ready(fileno: int, *, write: bool = False) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    if write:
        loop.add_writer(fileno, wake)
    else:
        loop.add_reader(fileno, wake)
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(fileno)
        else:
            loop.remove_reader(fileno)
