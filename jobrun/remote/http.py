"""The remote worker's side of the wire: JSON over HTTP/1.1 with the standard library.

One :class:`Channel` is one keep-alive connection used by one caller at a time (the claim's
long poll, the renewals and the reports each have their own, so a poll never delays a
renewal). Calls run in a thread (``asyncio.to_thread``); a broken connection is reopened at
the next call. A kept-alive connection the server closed while it was idle (uvicorn closes one
after 5 s, and a renewal comes every lease TTL / 3) fails at its next request before any answer:
that request is sent once more on a new connection, instead of failing every other renewal. The bearer token goes in a header and nowhere else: never in an error, a log
line or the process title.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from typing import Any


# How a kept-alive connection the server closed meanwhile fails, before any answer.
STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
         ConnectionAbortedError)


class ApiError(Exception):
    """An answer other than 2xx: its status, the envelope's code and message."""

    def __init__(self, status: int, code: str, message: str, fields: dict | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.fields = status, code, message, fields or {}


class Unreachable(Exception):
    """The server could not be reached or the connection broke mid-call."""


class Channel:
    def __init__(self, url: str, token: str, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"invalid --url {url!r}: http(s)://host[:port]")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port
        self.base = parts.path.rstrip("/") + "/api/v1"
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                         "Accept": "application/json"}
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            self._conn = kind(self.host, self.port, timeout=self.timeout)
        return self._conn

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The decoded JSON answer (None for 204); ApiError or Unreachable."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        with self._lock:
            for fresh in (self._conn is None, True):
                try:
                    conn = self._connection()
                    conn.request(method, self.base + path, body=data, headers=self._headers)
                    response = conn.getresponse()
                    raw = response.read()
                    break
                except STALE:
                    self.close()
                    if fresh:
                        raise Unreachable("the server closed the connection") from None
                except (OSError, http.client.HTTPException) as exc:
                    self.close()
                    raise Unreachable(f"{type(exc).__name__}: {exc}") from None
        if response.status == 204:
            return None
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = None
        if 200 <= response.status < 300:
            return answer
        envelope = answer if isinstance(answer, dict) else {}
        raise ApiError(response.status, str(envelope.get("code", "?")),
                       str(envelope.get("message", raw[:200].decode("utf-8", "replace"))),
                       envelope.get("fields") if isinstance(envelope.get("fields"), dict) else {})

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
