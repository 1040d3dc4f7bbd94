"""A Connector for unit tests: no PostgreSQL, connections whose answers are scripted by
statement text, connects that can be refused, and backoff pauses recorded instead of slept.
Everything else (sessions, reconnects, health, backoff) is the real store.connector code."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from jobrun.store.connector import Connector


class FakeCursor:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    async def fetchone(self) -> dict[str, Any] | None:
        return self.rows[0] if self.rows else None

    async def fetchall(self) -> list[dict[str, Any]]:
        return list(self.rows)


class FakeConnection:
    """An async connection: ``execute`` records the statement and answers the rows scripted
    for its text; ``terminate()`` breaks it as pg_terminate_backend would."""

    def __init__(self, number: int, answers: dict[str, list[dict[str, Any]]],
                 options: dict[str, Any]) -> None:
        self.number = number
        self.answers = answers
        self.options = options  # what the connector asked psycopg for
        self.executed: list[str] = []
        self.closed = False
        self.broken = False
        self._terminated = False

    async def execute(self, query: str, params: Any = None) -> FakeCursor:
        if self._terminated:  # as psycopg: broken once the client has seen it
            self.broken = True
            raise psycopg.OperationalError("terminating connection due to administrator command")
        if self.closed or self.broken:
            raise psycopg.OperationalError("the connection is lost")
        self.executed.append(query)
        return FakeCursor(self.answers.get(query, []))

    def terminate(self) -> None:
        """The backend is gone; the next statement fails and the connection is broken."""
        self._terminated = True

    async def close(self) -> None:
        self.closed = True


class FakeConnector(Connector):
    """``answers``: rows per statement text, for every connection; ``refuse``: how many
    connects fail before one succeeds (settable at any time)."""

    def __init__(self, answers: dict[str, list[dict[str, Any]]] | None = None,
                 refuse: int = 0) -> None:
        super().__init__("postgresql://jobrun:secret@fake/jobrun", sleep=self._pause,
                         jitter=lambda: 1.0)
        self.answers = answers or {}
        self.refuse = refuse
        self.connections: list[FakeConnection] = []
        self.pauses: list[float] = []  # the backoff waits asked for, in seconds

    async def _pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        await asyncio.sleep(0)

    async def _open_async(self, options: dict[str, Any], extra: dict[str, Any]) -> FakeConnection:
        if self.refuse > 0:
            self.refuse -= 1
            raise psycopg.OperationalError(
                "connection to server at fake (postgresql://jobrun:secret@fake/jobrun) refused")
        conn = FakeConnection(len(self.connections) + 1, self.answers, {**options, **extra})
        self.connections.append(conn)
        return conn

    def _open_sync(self, options: dict[str, Any], extra: dict[str, Any]) -> Any:
        raise NotImplementedError("FakeConnector has no blocking connections")

    @property
    def current(self) -> FakeConnection | None:
        return self.connections[-1] if self.connections else None
