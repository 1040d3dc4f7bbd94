"""Least-privilege roles: a producer that can enqueue and read but not lease, update or delete;
a real master running as the worker role; an observer that reads only."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

import jobrun
from jobrun.sql import for_schema
from jobrun.worker.claimer import claim_params
from jobrun.testing import wait_for
from tests.masterproc import MasterProcess

ROOT = Path(__file__).resolve().parents[2]


def _jobrun(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobrun", *args], capture_output=True, text=True,
                          env=dict(env, PYTHONPATH=str(ROOT)), cwd=ROOT, timeout=120)


@pytest.fixture
def roles(pg_dsn, schema, admin_conn, db_env):
    prefix = f"r{uuid.uuid4().hex[:8]}_"
    printed = _jobrun("--schema", schema, "roles", "--print", "--prefix", prefix, env=db_env)
    assert printed.returncode == 0, printed.stderr
    assert f'CREATE ROLE "{prefix}producer" NOLOGIN' in printed.stdout
    applied = _jobrun("--schema", schema, "roles", "--apply", "--prefix", prefix, env=db_env)
    assert applied.returncode == 0, applied.stderr
    logins = {}
    for role in ("producer", "worker", "observer"):
        login = f"{prefix}{role}_login"
        admin_conn.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
            sql.Identifier(login), sql.Identifier(prefix + role)))
        logins[role] = make_conninfo(pg_dsn, user=login)
    yield logins
    for role in ("producer", "worker", "observer"):
        for name in (f"{prefix}{role}_login", prefix + role):
            admin_conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin_conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def test_producer_enqueues_but_cannot_lease_update_or_delete(roles, schema):
    q = for_schema(schema)
    with jobrun.Client(roles["producer"], schema=schema) as client:
        job, created = client.enqueue("noop", {"n": 1})
        assert created
        replay, created = client.enqueue("noop", {"n": 2}, idempotency_key="k1")
        assert created and client.enqueue("noop", {"n": 2}, idempotency_key="k1")[1] is False
        many = client.enqueue_many([("noop", {"n": i}) for i in range(3)])
        assert len(many) == 3
        assert client.get(job.id).status == "queued"
    with psycopg.connect(roles["producer"], autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT id FROM {}.enqueue('noop', '{{}}'::jsonb)").format(
            sql.Identifier(schema))).fetchone()
        assert row[0] > job.id
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(q.claim_jobs, claim_params(["default"], 1, "x", 30))
        for statement in ("UPDATE {}.jobs SET status = 'leased'", "DELETE FROM {}.jobs",
                          "DELETE FROM {}.job_attempts", "UPDATE {}.queues SET paused = true"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql.SQL(statement).format(sql.Identifier(schema)))


def test_master_runs_as_the_worker_role(roles, schema, db_env, tmp_path, admin_conn):
    with jobrun.Client(roles["producer"], schema=schema) as client:
        ids = [i for i, _ in client.enqueue_many([("noop", {"n": i}) for i in range(5)])]
    env = dict(db_env, JOBRUN_DATABASE_URL=roles["worker"])
    with MasterProcess(env, tmp_path, "-c", "2", "--no-migrate") as m:
        m.wait_ready()

        def done() -> bool:
            rows = admin_conn.execute(
                sql.SQL("SELECT count(*) FROM {}.jobs WHERE id = ANY(%s) AND status = 'succeeded'")
                .format(sql.Identifier(schema)), (ids,)).fetchone()
            return rows[0] == len(ids)
        wait_for(done, timeout=30, message="the worker role's master to run the jobs")
        m.signal(15)
        assert m.wait(30) == 0
    assert "permission denied" not in m.stderr()


def test_observer_reads_only(roles, schema, db_env):
    env = dict(db_env, JOBRUN_DATABASE_URL=roles["observer"])
    for args in (("top", "--once"), ("workers",), ("stats",)):
        done = _jobrun("--schema", schema, *args, env=env)
        assert done.returncode == 0, (args, done.stderr)
    denied = _jobrun("--schema", schema, "enqueue", "noop", env=env)
    assert denied.returncode == 1 and "permission denied" in denied.stderr.lower()


def test_bad_prefix_is_refused(db_env, schema):
    done = _jobrun("--schema", schema, "roles", "--prefix", 'x"; DROP', env=db_env)
    assert done.returncode == 1 and "invalid role prefix" in done.stderr
