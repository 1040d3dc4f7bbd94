"""Every API request gets a request id, a span (with OpenTelemetry) and one access log line.

The request id is the caller's ``X-Request-ID`` when it is sane (1 to 128 of letters, digits
and ``._:-``, so that it can be logged and echoed as it is), else a new random one. It is
sent back in the ``X-Request-ID`` response header, carried by every error envelope
(``request_id``, jobrun.web.envelope) and written in the access line::

    ... INFO web.request request_id=4bf9... method=POST path=/api/v1/jobs status=201 ms=3.1

With OpenTelemetry installed, the request runs in a SERVER span named ``METHOD /route`` whose
parent is the request's ``traceparent`` header: an enqueue made by the request is a child of
it (jobrun.tracing), and the access line names the trace (``trace_id``). The span is this
middleware's own only when none is current already: FastAPI from 0.16x makes one itself
(its native telemetry, outside the middleware), and so does opentelemetry-instrument's ASGI
middleware; two SERVER spans for one request would be one too many.

This middleware wraps the whole application, outside Starlette's own error middleware, so
that a 500 is logged, and answered with the request id, like any other response.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from typing import Any, Awaitable, Callable

from jobrun import tracing
from jobrun.logs import event
from jobrun.web.envelope import REQUEST_ID

log = logging.getLogger("jobrun.web.access")
SANE_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def request_id(given: str | None) -> str:
    """``given`` when it is sane, else a new one (32 hex digits)."""
    if given is not None and SANE_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def _server_span(otel: tuple[Any, Any], scope: Scope, rid: str) -> Any:
    trace, TraceContextTextMapPropagator = otel
    carrier = {}
    parent = tracing.valid_traceparent(_header(scope, b"traceparent"))
    if parent is not None:
        carrier["traceparent"] = parent
        state = _header(scope, b"tracestate")
        if state:
            carrier["tracestate"] = state
    context = TraceContextTextMapPropagator().extract(carrier) if carrier else None
    return tracing.tracer().start_as_current_span(
        scope["method"], context=context, kind=trace.SpanKind.SERVER,
        attributes={"http.request.method": scope["method"], "url.path": scope["path"],
                    "jobrun.request_id": rid})


class Access:
    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(_header(scope, b"x-request-id"))
        token = REQUEST_ID.set(rid)
        started = time.perf_counter()
        status = 0
        header = (b"x-request-id", rid.encode())

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        otel = tracing.load()
        trace_id = None
        around = otel[0].get_current_span() if otel is not None else None
        if around is not None and around.get_span_context().is_valid:
            span_context: Any = contextlib.nullcontext()  # a server span made outside: FastAPI's
        else:
            span_context = _server_span(otel, scope, rid) if otel is not None else \
                contextlib.nullcontext()
        try:
            with span_context as span:
                try:
                    await self.app(scope, receive, sending)
                finally:
                    trace_id = _finish(span, scope, status or 500) or _trace_id(around)
        finally:
            REQUEST_ID.reset(token)
            fields: dict[str, Any] = {"request_id": rid, "method": scope["method"],
                                      "path": scope["path"], "status": status or 500,
                                      "ms": round((time.perf_counter() - started) * 1000, 1)}
            if trace_id:
                fields["trace_id"] = trace_id
            event(log, logging.INFO, "web.request", **fields)


def _finish(span: Any, scope: Scope, status: int) -> str | None:
    """Name the span by its route, record the status; the trace id, if the span has one."""
    if span is None:
        return None
    route = getattr(scope.get("route"), "path", None)
    if route:
        span.update_name(f"{scope['method']} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        trace = tracing.load()[0]  # type: ignore[index]
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(status)))
    return _trace_id(span)


def _trace_id(span: Any) -> str | None:
    context = span.get_span_context() if span is not None else None
    return f"{context.trace_id:032x}" if context is not None and context.is_valid else None
