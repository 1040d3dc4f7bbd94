"""The ASGI application of `jobrun web`: routes, the error envelope, the front-door guard,
CORS for explicitly allowed origins only, and around it all each request's id, span and
access line (jobrun.web.access)."""

from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from starlette.middleware.cors import CORSMiddleware

from jobrun import __version__, config, foreign, sdnotify
from jobrun.web import (access, envelope, events, models, routes_jobs, routes_observe, routes_queues,
                        routes_schedules, routes_workers, routes_workflows)
from jobrun.web.guard import HEALTHZ, Guard, Policy
from jobrun.web.pool import Database
from jobrun.web.wakeups import Wakeups

BODY_MARGIN = 64 * 1024  # room for the envelope around a payload at its limit
BATCH_FACTOR = 4         # a batch body may hold this many payloads at the limit


async def known_query_only(request: Request) -> None:
    """An unknown query parameter is a 422, never silently ignored."""
    route = request.scope.get("route")
    known = {p.alias for p in route.dependant.query_params} if route is not None else set()
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        hints = {name: "".join(f"; {h}" for h in [foreign.hint(name)] if h) for name in unknown}
        raise envelope.ApiError(  # ?state=...: "unknown query parameter 'state'; use status (...)"
            "validation_failed", f"unknown query parameter {unknown[0]!r}{hints[unknown[0]]}",
            {name: f"unknown query parameter{hints[name]}" for name in unknown})


BEARER = {"type": "http", "scheme": "bearer",
          "description": "The token of `jobrun web --token-file PATH`; a server started without"
                         " one needs none."}


def with_bearer(doc: dict) -> dict:
    """``doc`` stating the bearer token as a security scheme: what lets the explorer at
    /api/v1/docs (Swagger UI, its Authorize button) send the token. Each operation takes it
    or nothing (``{}``): the same document is served with and without a token configured.
    The health check needs none. In place; returns ``doc``."""
    doc.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = BEARER
    doc["security"] = [{"bearer": []}, {}]
    for method in doc.get("paths", {}).get(HEALTHZ, {}).values():
        method["security"] = []
    return doc


class Api(FastAPI):
    def build_middleware_stack(self):
        # Outside Starlette's error middleware: a 500 gets its request id and access line too.
        return access.Access(super().build_middleware_stack())


def create_app(settings: config.Settings, *, token: str | None = None,
               allow_origins: tuple[str, ...] = (), hosts: frozenset[str] = frozenset(),
               worker_tokens=None):
    database = Database(settings)
    wakeups = Wakeups(database.client.dsn, database.q.listen_ready)  # the worker protocol's

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        notify = sdnotify.Notify.from_env()  # under systemd (Type=notify); else a no-op
        await database.open()
        notify.send(ready=1, status="serving", mainpid=os.getpid())
        pinger = asyncio.ensure_future(sdnotify.ping(notify))
        try:
            yield
        finally:
            notify.send(stopping=1)
            pinger.cancel()
            await wakeups.close()
            await database.close()
            notify.close()

    app = Api(title="jobrun", version=__version__, lifespan=lifespan,
                  openapi_url="/api/v1/openapi.json", docs_url="/api/v1/docs", redoc_url=None,
                  dependencies=[Depends(known_query_only)])
    app.state.db = database
    app.state.settings = settings
    app.state.wakeups = wakeups
    app.state.remote_seen = {}  # worker id: (when read, its queues) (routes_workers)
    app.state.remote_plain_after = {}  # queue: when claim_plain may be tried again (routes_workers)
    app.openapi = lambda: with_bearer(  # type: ignore[method-assign]
        models.exact_bounds(FastAPI.openapi(app)))
    envelope.install(app)
    routers = (routes_jobs.router, routes_observe.router, routes_queues.router,
               routes_schedules.router, routes_workers.router, routes_workflows.router)
    for router in routers:
        app.include_router(router)
    app.state.routes = [route for router in routers for route in router.routes]  # for Allow
    events.install(app, database.client.dsn, database.q)  # GET /api/v1/events (the console's)
    limit = settings.max_payload_bytes + BODY_MARGIN
    app.state.body_limit = limit
    policy = Policy(token=token, allow_origins=frozenset(allow_origins), hosts=hosts,
                    body_limit=limit, worker_tokens=worker_tokens,
                    path_limits={"/api/v1/jobs/batch": BATCH_FACTOR * settings.max_payload_bytes
                                 + BODY_MARGIN})
    app.add_middleware(Guard, policy=policy)
    if allow_origins:
        # Outermost: answers preflights from the allowed origins; no wildcard, ever.
        app.add_middleware(CORSMiddleware, allow_origins=list(allow_origins),
                           allow_methods=["GET", "POST", "PATCH", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "If-Match",
                                          "Idempotency-Key", "X-Request-ID", "traceparent",
                                          "tracestate"],
                           expose_headers=["ETag", "X-Request-ID"])
    return app
