"""The connections `jobrun web` holds: a deadline on each request, a cap on how many, an end
to stalled and to event-stream responses.

uvicorn alone bounds none of this. A connection that never sends a request, or stops half-way
through its body, is kept for ever (its keep-alive timeout starts only after a first
response), and each costs a file descriptor whether or not it ever sends a byte. Once the
process is out of descriptors the event loop cannot accept, libuv closes whatever waits in the
listen backlog, and every new client is reset, /healthz included, with nothing logged. About
1,100 idle connections did that under the shipped unit's 1,024 descriptors.

:class:`GuardedH11Protocol` is uvicorn's h11 protocol (the one `jobrun web` runs) with:

- **A request deadline.** From the moment a connection is made, and again whenever a response
  has been sent, the client has ``request_timeout`` s to send one whole request, headers and
  body; else the connection is closed (``web.request_timeout``, at debug: an attack would
  flood the log). A request whose body has arrived is not timed: a long query or an event
  stream runs as long as it runs.
- **A cap.** ``max_connections`` defaults to RLIMIT_NOFILE less ``RESERVED_FDS`` (the process,
  its pool, the events poller) less an ``overflow`` margin. At the cap uvicorn's
  ``limit_concurrency`` answers every request 503 with ``Connection: close``. A connection
  past the cap gets ``OVER_CAP_GRACE`` s to send its request and read that 503; past the cap
  and the margin it is answered 503 and closed as soon as it is accepted, so the descriptors
  never run out. The first refusal is logged (``web.connections_capped``, a warning), then at
  most one line per ``LOG_EVERY`` s with the count refused since.
- **A bound on what a client leaves unread.** When the transport's write buffer passes its
  high-water mark (64 KiB beyond what the kernel holds) uvicorn pauses the response; if the
  client has read nothing more after ``request_timeout`` s the connection is aborted and the
  response ends (``web.connection_stalled``, a warning). An event stream's connection gets a
  kernel send buffer of ``STREAM_SNDBUF`` (Linux's would grow to 4 MiB, several frames), so
  what one stream can have queued is that, the transport's 64 KiB and the one newest frame
  its subscriber holds (jobrun.web.events); a reader that stopped reading is dropped once
  that is full, instead of holding its connection and its subscriber for ever.
- **Event streams end at shutdown.** uvicorn's graceful shutdown waits for every in-flight
  response, and an event stream never finishes: stopping waited the whole graceful timeout,
  then cancelled the stream with a traceback. At shutdown an open stream's connection is
  closed instead; the stream sees the client gone and ends as on any disconnect.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from jobrun.logs import event
from jobrun.web import REQUEST_TIMEOUT
from jobrun.web.events import PATH as EVENTS_PATH

log = logging.getLogger("jobrun.web.connections")

RESERVED_FDS = 64       # descriptors kept for the process: stdio, the loop, pool, poller, files
OVER_CAP_GRACE = 1.0    # seconds a connection past the cap has to send a request for its 503
LOG_EVERY = 10.0        # seconds between two web.connections_capped lines
STREAM_SNDBUF = 64 * 1024  # kernel send buffer of an event stream's connection (bytes)
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
           b"content-length: 19\r\nconnection: close\r\n\r\nService Unavailable")


def descriptor_limit() -> int:
    """The soft RLIMIT_NOFILE of this process (unlimited counts as 1 << 20)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass(frozen=True)
class Limits:
    request_timeout: float = REQUEST_TIMEOUT
    max_connections: int = 1024
    overflow: int = 128  # connections past the cap that get OVER_CAP_GRACE before closing

    @classmethod
    def for_descriptors(cls, nofile: int, request_timeout: float = REQUEST_TIMEOUT,
                        max_connections: int | None = None) -> "Limits":
        """The cap that ``nofile`` descriptors allow: an eighth of what is left after
        RESERVED_FDS is the overflow margin, the rest the cap. A given ``max_connections``
        may only lower it."""
        usable = max(nofile - RESERVED_FDS, 16)
        overflow = max(usable // 8, 4)
        cap = usable - overflow
        if max_connections is not None:
            cap = min(cap, max_connections)
        return cls(request_timeout, max(cap, 1), overflow)


@dataclass
class Admission:
    """The limits every connection of one server shares, and the refusals to log."""

    limits: Limits
    clock: Any = time.monotonic
    refused: int = 0  # connections past the cap since the last log line
    _logged_at: float | None = field(default=None, repr=False)

    def over_cap(self, open_connections: int) -> bool:
        """Whether a connection that makes ``open_connections`` open is past the cap; logs."""
        if open_connections <= self.limits.max_connections:
            return False
        self.refused += 1
        now = self.clock()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            event(log, logging.WARNING, "web.connections_capped", open=open_connections,
                  max_connections=self.limits.max_connections, refused=self.refused)
            self._logged_at, self.refused = now, 0
        return True

    def protocol(self) -> type["GuardedH11Protocol"]:
        """The protocol class to hand uvicorn (``http=``), bound to these limits."""
        return type("GuardedH11Protocol", (GuardedH11Protocol,), {"admission": self})


class GuardedH11Protocol(H11Protocol):
    admission: Admission  # set by Admission.protocol()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._budget = self.admission.limits.request_timeout
        self._deadline: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        open_now = len(self.connections)
        if self.admission.over_cap(open_now):
            if open_now > self.admission.limits.max_connections + self.admission.limits.overflow:
                transport.write(REFUSAL)
                transport.close()
                return
            self._budget = OVER_CAP_GRACE  # long enough to ask and be answered 503
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._deadline, self._stall):
            if timer is not None:
                timer.cancel()
        self._deadline = self._stall = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.scope is not None and self.scope.get("path") == EVENTS_PATH:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SNDBUF)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def _watch(self) -> None:
        """Time the request the client owes: armed while one is due and not yet whole."""
        waiting = (self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
                   and not self.transport.is_closing())
        if waiting and self._deadline is None:
            self._deadline = self.loop.call_later(self._budget, self._request_timed_out)
        elif not waiting and self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_timed_out(self) -> None:
        self._deadline = None
        event(log, logging.DEBUG, "web.request_timeout", client=_peer(self.client),
              timeout=self._budget, state=self.conn.their_state.__name__)
        self.transport.close()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.admission.limits.request_timeout,
                                               self._write_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _write_stalled(self) -> None:
        self._stall = None
        event(log, logging.WARNING, "web.connection_stalled", client=_peer(self.client),
              path=(self.scope or {}).get("path"), timeout=self.admission.limits.request_timeout,
              unsent=self.transport.get_write_buffer_size())
        self.transport.abort()  # the client reads nothing: what waits for it goes too

    def shutdown(self) -> None:
        streaming = (self.cycle is not None and not self.cycle.response_complete
                     and (self.scope or {}).get("path") == EVENTS_PATH)
        if not streaming:
            super().shutdown()
        elif self.flow.write_paused:
            self.transport.abort()
        else:
            self.transport.close()  # the stream reads a disconnect and ends


def _peer(client: tuple[str, int] | None) -> str | None:
    return f"{client[0]}:{client[1]}" if client else None
