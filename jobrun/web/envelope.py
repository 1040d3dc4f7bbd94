"""The one error envelope of the HTTP API: ``{"message", "code", "fields", "request_id"}`` for
every error (``request_id``: the request's, as its X-Request-ID header says; jobrun.web.access).

Every way a request can fail ends here: jobrun's own errors (bad input, not found, conflict,
a stale version), FastAPI's request validation and HTTP errors, malformed JSON, and anything
unexpected (500 with a fixed message; the traceback goes to the server log, never to the
caller). ``responses(...)`` describes the same envelope in the OpenAPI document.

A 500 or 503 is logged with its reason: ``web.error``, ``web.database_unavailable`` or
``web.internal_error`` with the method, the path and the error's first line, the database
URL's password replaced by '***' (jobrun.redact); the line goes through jobrun's log format
(jobrun.logs.uvicorn_config), fields and all.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from jobrun import foreign
from jobrun.errors import (Conflict, DatabaseUnavailable, InvalidInput, JobrunError, NotFound,
                           Refused, StaleVersion, UnknownQueue)
from jobrun.logs import event
from jobrun.redact import redact_text

log = logging.getLogger("jobrun.web")
# The request being answered (set by jobrun.web.access for each request, in its own task).
REQUEST_ID: ContextVar[str | None] = ContextVar("jobrun_request_id", default=None)

# code -> HTTP status. The API answers with no other codes.
CODES = {
    "invalid_json": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "payload_too_large": 413,
    "validation_failed": 422,
    "internal_error": 500,
    "unavailable": 503,
}
_BY_STATUS = {status: code for code, status in CODES.items()}


class ErrorBody(BaseModel):
    """What every error response carries."""

    message: str
    code: str
    fields: dict[str, str] = {}
    current: dict[str, Any] | None = None  # 409 on a stale version: the job or queue as it is now
    request_id: str | None = None  # the X-Request-ID of the request, to find it in the log


class ApiError(Exception):
    def __init__(self, code: str, message: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.fields = code, message, fields or {}


def error_response(code: str, message: str, fields: dict[str, str] | None = None,
                   current: dict[str, Any] | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"message": message, "code": code, "fields": fields or {}}
    if current is not None:
        body["current"] = current
    request_id = REQUEST_ID.get()
    if request_id is not None:
        body["request_id"] = request_id
        # Here too, for an answer that does not pass the middleware (a 500 is sent outside it).
        headers = {**(headers or {}), "X-Request-ID": request_id}
    return JSONResponse(body, status_code=CODES[code], headers=headers)


def responses(*codes: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI descriptions of the error responses a route can give."""
    return {CODES[c]: {"model": ErrorBody, "description": c} for c in codes}


# The first words of jobrun.validate's messages name the request field they are about.
_FIELD_PREFIXES = (
    ("invalid task name", "task"), ("invalid queue name", "queue"), ("queue ", "queue"),
    ("invalid priority", "priority"), ("invalid max_attempts", "max_attempts"),
    ("invalid idempotency key", "idempotency_key"), ("payload", "payload"),
    ("invalid concurrency key", "concurrency_key"),
    ("invalid duration", "delay"), ("run_at", "run_at"), ("give run_at or delay", "delay"),
    ("invalid version", "version"), ("invalid status", "status"), ("invalid outcome", "outcome"),
    ("invalid rate", "rate"), ("invalid aging", "aging"), ("invalid retention", "retention"),
    ("invalid concurrency", "concurrency"), ("invalid key_concurrency", "key_concurrency"),
)


def field_of(message: str) -> str | None:
    prefix = ""
    if message.startswith("job ") and ": " in message:  # a batch item: "job 3: ..."
        head, message = message.split(": ", 1)
        prefix = f"jobs.{head[4:]}."
    for start, field in _FIELD_PREFIXES:
        if message.startswith(start):
            return prefix + field
    return None


def _invalid(exc: InvalidInput) -> JSONResponse:
    message = str(exc)
    field = field_of(message)
    if isinstance(exc, UnknownQueue):
        field = field or "queue"
    return error_response("validation_failed", message, {field: message} if field else {})


def reason(request: Request, exc: BaseException, *, kind: bool = False) -> dict[str, str]:
    """The fields that say why a request failed: its method and path, and the error's first
    line (with its type, for one jobrun did not raise) without the database's password."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if kind:
        first = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    database = getattr(request.app.state, "db", None)
    dsn = database.client.dsn if database is not None else None
    return {"method": request.method, "path": request.url.path,
            "error": redact_text(first, dsn)}


def _jobrun_error(request: Request, exc: JobrunError) -> JSONResponse:
    if isinstance(exc, InvalidInput):
        return _invalid(exc)
    if isinstance(exc, NotFound):
        return error_response("not_found", str(exc))
    if isinstance(exc, StaleVersion):
        current = (exc.current.to_dict() if hasattr(exc.current, "to_dict") else
                   exc.current if isinstance(exc.current, dict) else None)
        return error_response("conflict", str(exc), current=json.loads(
            json.dumps(current, default=_iso)) if current else None)
    if isinstance(exc, (Conflict, Refused)):
        return error_response("conflict", str(exc))
    if isinstance(exc, DatabaseUnavailable):
        event(log, logging.ERROR, "web.database_unavailable", **reason(request, exc))
        return error_response("unavailable", "the database is unavailable; try again later")
    event(log, logging.ERROR, "web.error", **reason(request, exc))
    return error_response("internal_error", "internal error")


def _iso(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _loc(loc: tuple | list) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _message(error: dict[str, Any]) -> str:
    """A validation error's message; an unknown field with another job system's name for one
    of jobrun's (``max_retries``) says which (jobrun.foreign)."""
    message = str(error.get("msg", "invalid"))
    loc = error.get("loc", ())
    if error.get("type") == "extra_forbidden" and loc:
        known = foreign.hint(str(loc[-1]))
        if known is not None:
            return f"unknown field; {known}"
    return message


def _validation(exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response("invalid_json", "the request body is not valid JSON")
    fields = {}
    for e in errors:
        fields.setdefault(_loc(e.get("loc", ())), _message(e))
    first = next(iter(fields.items()))
    return error_response("validation_failed", f"{first[0]}: {first[1]}", fields)


def allowed(request: Request) -> str:
    """The Allow header of the request's path: the methods of every route on it. (Starlette
    names only the first route that matched the path, and GET /jobs/1 and DELETE /jobs/1 are
    two routes.)"""
    methods = {"OPTIONS"}
    for route in (*request.app.router.routes, *getattr(request.app.state, "routes", ())):
        if isinstance(route, Route) and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def _http(request: Request, exc: HTTPException) -> Response:
    code = _BY_STATUS.get(exc.status_code, "internal_error")
    if exc.status_code == 400:
        # FastAPI's answer to a body it could not parse at all (e.g. nested too deeply).
        return error_response("invalid_json", "the request body is not valid JSON")
    if exc.status_code == 405:
        allow = allowed(request)
        if request.method == "OPTIONS":  # what may be done here: an answer, not an error
            return Response(status_code=204, headers={"Allow": allow})
        return error_response(code, "method not allowed", headers={"Allow": allow})
    message = {404: "no such resource"}.get(exc.status_code, str(exc.detail))
    return error_response(code, message, headers=getattr(exc, "headers", None))


def install(app: FastAPI) -> None:
    """Route every error of ``app`` to the envelope."""

    async def on_api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.code, exc.message, exc.fields)

    async def on_jobrun(request: Request, exc: JobrunError) -> JSONResponse:
        return _jobrun_error(request, exc)

    async def on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _validation(exc)

    async def on_http(request: Request, exc: HTTPException) -> Response:
        return _http(request, exc)

    async def on_too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        # JSON the parser took, nested too deeply to check or store.
        return error_response("validation_failed", "the request body is nested too deeply",
                              {"body": "nested too deeply"})

    async def on_other(request: Request, exc: Exception) -> JSONResponse:
        log.error("web.internal_error", exc_info=exc,
                  extra={"jobrun_fields": reason(request, exc, kind=True)})
        return error_response("internal_error", "internal error")

    app.add_exception_handler(ApiError, on_api)
    app.add_exception_handler(JobrunError, on_jobrun)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RecursionError, on_too_deep)
    app.add_exception_handler(Exception, on_other)
