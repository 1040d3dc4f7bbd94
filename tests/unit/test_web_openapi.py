"""The OpenAPI document describes every route of `jobrun web` and every error it can give."""

from __future__ import annotations

from fastapi.routing import APIRoute

from jobrun import config
from jobrun.web import (routes_jobs, routes_observe, routes_queues, routes_schedules,
                        routes_workers, routes_workflows)
from jobrun.web.app import create_app
from jobrun.web.envelope import CODES, field_of


def _app():
    return create_app(config.Settings(database_url="postgresql://unused@/x"))


def test_every_route_is_described_with_the_envelope():
    app = _app()
    doc = app.openapi()
    routes = [r for router in (routes_jobs.router, routes_observe.router, routes_queues.router,
               routes_schedules.router, routes_workers.router, routes_workflows.router)
              for r in router.routes if isinstance(r, APIRoute)]
    assert len(routes) >= 16 and all(r.path.startswith("/api/v1/") for r in routes)
    assert len(doc["paths"]) == len({r.path_format for r in routes})
    for route in routes:
        for method in route.methods:
            op = doc["paths"][route.path_format][method.lower()]
            errors = {int(s) for s in op["responses"] if int(s) >= 400}
            assert 500 in errors, route.path
            for status in errors:
                ref = op["responses"][str(status)]["content"]["application/json"]["schema"]
                assert ref == {"$ref": "#/components/schemas/ErrorBody"}, (route.path, status)
            if route.path != "/api/v1/healthz":
                assert {401, 422} <= errors, route.path
            if method != "GET":
                assert {400, 403, 413} <= errors, route.path
    described = {int(s) for p in doc["paths"].values() for op in p.values()
                 for s in op["responses"]}
    assert set(CODES.values()) - {405} <= described  # 405 is the router's, for any path
    assert set(doc["components"]["schemas"]["ErrorBody"]["properties"]) >= {
        "message", "code", "fields"}


def test_field_of_names_the_field_of_a_validation_message():
    assert field_of("invalid task name 'a b': ...") == "task"
    assert field_of("job 3: invalid priority 500: ...") == "jobs.3.priority"
    assert field_of("something else") is None


def _answers(*requests: tuple[str, str]) -> list:
    """The app's answers to (method, path) requests, in process; no lifespan: none of these
    reaches the database."""
    import asyncio

    import httpx

    async def ask():
        transport = httpx.ASGITransport(app=_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return [await c.request(method, path) for method, path in requests]
    return asyncio.run(ask())


def test_the_document_states_jobrun_validates_rules():
    from jobrun import queue_rules, validate

    schemas = _app().openapi()["components"]["schemas"]
    job = schemas["NewJob"]["properties"]
    assert job["task"]["pattern"] == f"^{validate.TASK_RE.pattern}$"
    assert job["queue"]["pattern"] == f"^{validate.QUEUE_RE.pattern}$"
    assert {"type": "integer", "minimum": validate.PRIORITY_MIN,
            "maximum": validate.PRIORITY_MAX} in job["priority"]["anyOf"]
    assert {"type": "string", "minLength": 1, "maxLength": validate.KEY_MAX,
            "pattern": "^[^\\x00]*$"} in job["idempotency_key"]["anyOf"]
    queue = schemas["QueueChange"]
    version = queue["properties"]["version"]["anyOf"][0]
    assert version["maximum"] == 2**63 - 1 and isinstance(version["maximum"], int)
    assert {"type": "number", "minimum": queue_rules.RETENTION_MIN,
            "maximum": queue_rules.RETENTION_MAX} in queue["properties"]["retention"]["anyOf"]
    assert {"required": ["retention"]} in queue["anyOf"]  # a change names a setting
    assert schemas["NewSchedule"]["properties"]["cron"]["pattern"].startswith("^(@yearly|")


def test_options_answers_with_allow_and_other_methods_are_405_with_allow():
    paths = {"/api/v1/jobs/3": "DELETE, GET, OPTIONS", "/api/v1/jobs": "GET, OPTIONS, POST",
             "/api/v1/jobs/batch": "OPTIONS, POST", "/api/v1/stats": "GET, OPTIONS",
             "/api/v1/queues/q": "DELETE, GET, OPTIONS, PATCH"}
    for path, methods in paths.items():
        options, put = _answers(("OPTIONS", path), ("PUT", path))
        assert (options.status_code, options.headers.get("allow")) == (204, methods), path
        assert (put.status_code, put.headers.get("allow")) == (405, methods), path
        assert put.json()["code"] == "method_not_allowed"
    [batch] = _answers(("GET", "/api/v1/jobs/batch"))  # not a job id
    assert (batch.status_code, batch.headers.get("allow")) == (405, "OPTIONS, POST")


def test_an_unexpected_error_is_logged_with_its_reason_and_no_password():
    import io
    import logging

    from starlette.requests import Request

    from jobrun import logs

    app = _app()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    web_log = logging.getLogger("jobrun.web")
    web_log.addHandler(handler)
    try:
        request = Request({"type": "http", "method": "POST", "path": "/api/v1/jobs",
                           "headers": [], "query_string": b"", "app": app})
        try:
            raise ValueError("boom at postgresql://u:s3cret@db/x\nsecond line")
        except ValueError as exc:
            import asyncio

            response = asyncio.run(app.exception_handlers[Exception](request, exc))
    finally:
        web_log.removeHandler(handler)
    assert response.status_code == 500
    out = stream.getvalue()
    first = out.splitlines()[0]
    assert " ERROR web.internal_error method=POST path=/api/v1/jobs" in first
    assert 'error="ValueError: boom at postgresql://u:***@db/x"' in first
    assert "s3cret" not in out and "Traceback" in out
