"""`jobrun web`'s front door, on real subprocesses: token, loopback-only without one,
cross-origin writes, Host checks, and errors that leak nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import psycopg
from psycopg import sql

from tests.webproc import WebProcess, free_port, web, web_env, web_schema  # noqa: F401

TOKEN = "s3cret-token-0123456789abcdef"


def run_web(env, *args):
    return subprocess.run([sys.executable, "-m", "jobrun", "web", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_token_required_except_healthz(pg_dsn, web_schema, tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    server = WebProcess(web_env(pg_dsn, web_schema), "--token-file", str(path)).start()
    try:
        base = server.base + "/api/v1"
        assert httpx.get(base + "/healthz").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                        {"Authorization": "Basic " + TOKEN}):
            r = httpx.get(base + "/jobs", headers=headers)
            assert r.status_code == 401 and r.json()["code"] == "unauthorized"
            assert TOKEN not in r.text
        r = httpx.post(base + "/jobs", json={"task": "t"})
        assert r.status_code == 401
        ok = httpx.get(base + "/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
    finally:
        out = server.stop()
    assert TOKEN not in out


def test_non_loopback_bind_needs_a_token(pg_dsn, web_schema, tmp_path):
    env = web_env(pg_dsn, web_schema)
    refused = run_web(env, "--bind", f"0.0.0.0:{free_port()}")
    assert refused.returncode == 1 and "not loopback" in refused.stderr
    assert "Traceback" not in refused.stderr
    path = tmp_path / "token"
    path.write_text(TOKEN)
    path.chmod(0o644)
    loose = run_web(env, "--bind", f"0.0.0.0:{free_port()}", "--token-file", str(path))
    assert loose.returncode == 1 and "chmod 600" in loose.stderr and TOKEN not in loose.stderr
    assert run_web(env, "--allow-origin", "*").returncode == 1


def test_cross_origin_writes_are_refused(web, pg_dsn, web_schema):
    base = web.base + "/api/v1"
    with psycopg.connect(pg_dsn) as conn:
        count = sql.SQL("SELECT count(*) FROM {}.jobs").format(sql.Identifier(web_schema))
        before = conn.execute(count).fetchone()[0]
        for origin in ("http://evil.example", "null", f"http://localhost:{web.port + 1}"):
            r = httpx.post(base + "/jobs", json={"task": "t"}, headers={"Origin": origin})
            assert r.status_code == 403 and r.json()["code"] == "forbidden"
            assert "access-control-allow-origin" not in r.headers
        assert conn.execute(count).fetchone()[0] == before
        own = httpx.post(base + "/jobs", json={"task": "t"}, headers={"Origin": web.base})
        assert own.status_code == 201
    rebound = httpx.get(base + "/jobs", headers={"Host": f"evil.example:{web.port}"})
    assert rebound.status_code == 403 and rebound.json()["code"] == "forbidden"
    read = httpx.get(base + "/jobs", headers={"Origin": "http://evil.example"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


def test_allowed_origin(pg_dsn, web_schema):
    origin = "http://console.example:8080"
    with WebProcess(web_env(pg_dsn, web_schema), "--allow-origin", origin) as server:
        base = server.base + "/api/v1"
        r = httpx.post(base + "/jobs", json={"task": "t"}, headers={"Origin": origin})
        assert r.status_code == 201 and r.headers["access-control-allow-origin"] == origin
        pre = httpx.options(base + "/jobs", headers={
            "Origin": origin, "Access-Control-Request-Method": "POST"})
        assert pre.status_code == 200
        other = httpx.post(base + "/jobs", json={"task": "t"},
                           headers={"Origin": "http://other.example"})
        assert other.status_code == 403


def test_internal_and_unavailable_errors_leak_nothing(pg_dsn, tmp_path):
    from tests.conftest import _drop_schema, _new_schema

    schema = _new_schema(pg_dsn)
    try:
        with WebProcess(web_env(pg_dsn, schema)) as server:
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(sql.SQL("ALTER TABLE {}.jobs RENAME TO jobs_gone").format(
                    sql.Identifier(schema)))
            r = httpx.get(server.base + "/api/v1/jobs")
            assert r.status_code == 500 and r.json()["code"] == "internal_error"
            assert "jobs" not in r.json()["message"] and "SELECT" not in r.text
    finally:
        _drop_schema(pg_dsn, schema)
    env = web_env("postgresql://nobody:pw-not-shown@127.0.0.1:1/none", "jobrun")
    server = WebProcess(env).start(healthy=503)
    try:
        r = httpx.get(server.base + "/api/v1/jobs", timeout=30)
        assert r.status_code == 503 and r.json()["code"] == "unavailable"
        assert "pw-not-shown" not in r.text
    finally:
        assert "pw-not-shown" not in server.stop()
