"""The API's front door, as one ASGI middleware: host, token, origin and body size.

In order, for every HTTP request:

1. **Host.** When bound to loopback, the Host header must name this server (127.0.0.1,
   localhost, [::1] or the bind address): a page that rebinds its DNS name to 127.0.0.1
   gets a 403, not the API.
2. **Token.** With a token configured, every request but ``/api/v1/healthz`` and a GET of the
   API explorer's page and document (``DOCS``) needs ``Authorization: Bearer <token>``,
   compared in constant time; else 401. A worker token (``--worker-token-file``,
   jobrun.web.workertokens) opens the worker protocol alone, in its queues (the scope is put
   in ``scope["state"]["worker_scope"]`` for the routes); any other route is a 403 to it. With
   worker tokens configured, the protocol needs one of them (or the admin token). A browser loads a page without headers of its own, so
   the explorer must load before it can be given the token (its Authorize button); the page
   and the document hold no data, and every call made from the page needs the token.
3. **Origin.** A mutation (any method but GET, HEAD, OPTIONS) that carries an Origin header
   other than the server's own or one of ``--allow-origin`` gets a 403. Browsers always send
   Origin on cross-site writes; tools such as curl send none and are not affected.
4. **Size.** A body over the route's limit gets a 413 before any of it is parsed: the
   nothing past the limit is kept, and nothing over DRAIN_MAX is read at all.
5. **JSON.** A body that is not JSON (whatever its Content-Type claims), or is nested past
   what the parser can hold, gets a 400; what passes reaches the app as application/json.

Every refusal is the error envelope. The token is never logged or echoed.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from jobrun.web import workertokens
from jobrun.web.envelope import error_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
HEALTHZ = "/api/v1/healthz"
DOCS = frozenset({"/api/v1/docs", "/api/v1/openapi.json"})  # the explorer: no data
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# A body over its limit but under this is read and dropped before the 413, so that clients
# which send the whole body before reading (most do) see the answer; a larger one is answered
# at once and the connection closed.
DRAIN_MAX = 16 * 1024 * 1024

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Policy:
    token: str | None = None
    allow_origins: frozenset[str] = frozenset()
    # Host header values this server answers to; empty: any (a non-loopback bind, with a token).
    hosts: frozenset[str] = frozenset()
    body_limit: int = 1024 * 1024 + 65536
    # Larger limits for some paths (the batch endpoint).
    path_limits: dict[str, int] = field(default_factory=dict)
    worker_tokens: workertokens.WorkerTokens | None = None


def loopback_hosts(host: str, port: int) -> frozenset[str]:
    names = set(LOOPBACK_HOSTS) | {f"[{host}]" if ":" in host else host}
    return frozenset(n for name in names for n in (name, f"{name}:{port}"))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _bearer(scope: Scope) -> str | None:
    given = _header(scope, b"authorization") or ""
    scheme, _, value = given.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _bearer_ok(scope: Scope, token: str) -> bool:
    given = _bearer(scope)
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _open(scope: Scope) -> bool:
    """Needs no token: the health check, and reading the API explorer's page and document."""
    path = scope["path"]
    return path == HEALTHZ or (path in DOCS and scope["method"] in ("GET", "HEAD"))


class Guard:
    def __init__(self, app: Callable, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None and scope["method"] not in SAFE_METHODS:
            receive, refusal = await self._bounded(scope, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope):
        p = self.policy
        host = _header(scope, b"host")
        if p.hosts and (host or "").lower() not in p.hosts:
            return error_response("forbidden", "this server does not answer to that Host header")
        refusal = self._token_refusal(scope)
        if refusal is not None:
            return refusal
        origin = _header(scope, b"origin")
        if scope["method"] not in SAFE_METHODS and origin is not None:
            own = f"{scope.get('scheme', 'http')}://{host}" if host else None
            if origin != own and origin not in p.allow_origins:
                return error_response("forbidden", "cross-origin requests may not change anything")
        return None

    def _token_refusal(self, scope: Scope):
        """None when the request may go on (a worker token's scope noted in the scope)."""
        p = self.policy
        if _open(scope):
            return None
        protocol = workertokens.is_protocol(scope["method"], scope["path"])
        if p.token is not None and _bearer_ok(scope, p.token):
            return None
        worker = None
        if p.worker_tokens is not None:
            given = _bearer(scope)
            worker = p.worker_tokens.match(given) if given is not None else None
        if worker is not None:
            if not protocol:
                return error_response("forbidden", "a worker token is for the worker protocol"
                                      " (/api/v1/workers) only")
            scope.setdefault("state", {})["worker_scope"] = worker
            return None
        if p.token is None and not (protocol and p.worker_tokens is not None):
            return None  # no token configured for this route (a loopback server)
        return error_response("unauthorized", "missing or wrong bearer token",
                              headers={"WWW-Authenticate": "Bearer"})

    async def _bounded(self, scope: Scope, receive: Receive):
        """Read the whole body, up to the limit; replay it to the app."""
        limit = self.policy.path_limits.get(scope["path"], self.policy.body_limit)

        def too_large():
            return error_response("payload_too_large", f"the request body is over {limit} bytes")
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > DRAIN_MAX):
            return receive, too_large()
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > DRAIN_MAX:
                return receive, too_large()
            if size <= limit:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if size > limit:
            return receive, too_large()
        body = b"".join(chunks)
        if body:
            try:
                json.loads(body)
            except (ValueError, RecursionError) as exc:
                deep = isinstance(exc, RecursionError)
                return receive, error_response("invalid_json", "the request body is nested too"
                                               " deeply" if deep else "the request body is not"
                                               " valid JSON")
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope["headers"] = headers + [(b"content-type", b"application/json")]
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay, None
