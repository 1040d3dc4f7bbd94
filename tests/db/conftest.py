"""Fixtures of the database tier beyond tests/conftest.py's: the `jobrun` command line run
against the test's own schema (tests/cliproc.py reads its answers), and plain SQL on it."""

from __future__ import annotations

import pytest
from psycopg import sql

from tests.cliproc import run


@pytest.fixture
def env(db_env, tmp_path):
    """The CLI's environment and an empty working directory (no ./jobrun.toml is picked up)."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return {**db_env, "PWD": str(cwd)}, cwd


@pytest.fixture
def cli(env):
    """``cli("enqueue", "t", ...)``: `jobrun` run as a subprocess; ``env=`` replaces the
    environment."""
    environ, cwd = env
    return lambda *args, **kw: run(kw.pop("env", environ), *args, cwd=cwd, **kw)


@pytest.fixture
def execute(admin_conn, schema):
    """``execute("SELECT ... FROM {s}.jobs", params)``: SQL on this test's schema."""
    def run_sql(text: str, params=()):
        return admin_conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params)
    return run_sql
