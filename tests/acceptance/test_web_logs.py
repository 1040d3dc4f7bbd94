"""`jobrun web`'s log says why it answered 500 or 503: the event, the method and path, and the
error's first line, in jobrun's text or JSON format, and never the database's password."""

from __future__ import annotations

import json

import httpx
import psycopg
from psycopg import sql

from tests.webproc import WebProcess, web_env

PASSWORD = "pw-not-shown"


def _lines(output: str, event: str) -> list[str]:
    return [line for line in output.splitlines() if f" {event} " in f" {line} "]


def test_a_500_is_logged_with_its_reason(pg_dsn):
    from tests.conftest import _drop_schema, _new_schema

    schema = _new_schema(pg_dsn)
    try:
        server = WebProcess(web_env(pg_dsn, schema)).start()
        try:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER TABLE {}.jobs RENAME TO jobs_gone").format(
                    sql.Identifier(schema)))
            r = httpx.get(server.base + "/api/v1/jobs", timeout=30)
            assert r.status_code == 500 and r.json()["message"] == "internal error"
        finally:
            out = server.stop()
    finally:
        _drop_schema(pg_dsn, schema)
    [line] = _lines(out, "web.error")
    # 2026-12-04T12:00:00.123Z ERROR web.error method=GET path=/api/v1/jobs error="..."
    assert " ERROR web.error method=GET path=/api/v1/jobs error=" in line
    assert "jobs" in line.split("error=", 1)[1] and "does not exist" in line


def test_a_503_is_logged_with_its_reason_and_no_password(tmp_path):
    env = web_env(f"postgresql://nobody:{PASSWORD}@127.0.0.1:1/none", "jobrun")
    env["JOBRUN_LOG_FORMAT"] = "json"
    server = WebProcess(env).start(healthy=503)
    try:
        r = httpx.get(server.base + "/api/v1/stats", timeout=30)
        assert r.status_code == 503 and r.json()["code"] == "unavailable"
    finally:
        out = server.stop()
    assert PASSWORD not in out
    docs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert docs and len(docs) == len(out.splitlines())  # every line, uvicorn's too, is JSON
    found = [d for d in docs if d["event"] == "web.database_unavailable"
             and d.get("path") == "/api/v1/stats"]
    assert found, out
    assert found[0]["level"] == "error" and found[0]["method"] == "GET"
    assert "127.0.0.1" in found[0]["error"] and "1" in found[0]["error"]
