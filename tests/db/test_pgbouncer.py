"""Producers through PgBouncer in transaction mode (Debian's pgbouncer, started here on a free
loopback port as an unprivileged user, in front of the test PostgreSQL); a master refuses a
pooled database URL."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

import jobrun
from jobrun import config
from jobrun.testing import wait_for

ROOT = Path(__file__).resolve().parents[2]


def _binary() -> str:
    for candidate in (shutil.which("pgbouncer"), "/usr/sbin/pgbouncer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("pgbouncer is not installed (Debian package: pgbouncer)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bouncer(pg_dsn):
    binary = _binary()
    target = conninfo_to_dict(pg_dsn)
    root = Path(tempfile.mkdtemp(prefix="jobrun-pgbouncer-"))
    root.chmod(0o755)
    user = None
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        from jobrun.testing import _ensure_user, PG_USER

        _ensure_user()
        user = PG_USER
    (root / "users.txt").write_text(f'"{target.get("user", "postgres")}" ""\n')
    port = _free_port()
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"jobrun = host={target['host']} port={target.get('port', 5432)} "
        f"dbname={target.get('dbname', 'postgres')}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 3\nmax_client_conn = 100\n"
        f"logfile = {root / 'pgbouncer.log'}\n"
        "ignore_startup_parameters = extra_float_digits\n")
    for path in root.iterdir():
        path.chmod(0o644)
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)  # for its log file
    proc = subprocess.Popen([binary, str(root / "pgbouncer.ini")], user=user,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dsn = f"postgresql://{target.get('user', 'postgres')}@127.0.0.1:{port}/jobrun"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {proc.stderr.read().decode()}")
        try:
            psycopg.connect(dsn, connect_timeout=2, prepare_threshold=None).close()
            return True
        except psycopg.OperationalError:
            return False
    try:
        wait_for(up, timeout=30, message="pgbouncer to accept connections")
        yield dsn
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(root, ignore_errors=True)


def _count(admin_conn, schema: str) -> int:
    return admin_conn.execute(sql.SQL("SELECT count(*) FROM {}.jobs").format(
        sql.Identifier(schema))).fetchone()[0]


def test_client_enqueues_through_pgbouncer(bouncer, schema, admin_conn):
    settings = config.Settings(database_url=bouncer, schema=schema, pooled=True,
                               max_payload_bytes=4096)
    clients = [jobrun.Client(settings=settings) for _ in range(4)]
    try:
        for round_ in range(10):  # well past psycopg's prepare threshold (5)
            for i, client in enumerate(clients):
                job, created = client.enqueue("noop", {"r": round_, "c": i})
                assert created and client.get(job.id).status == "queued"
                _, created = client.enqueue("noop", {"k": i}, idempotency_key=f"k{i}")
                assert created == (round_ == 0)
                ids = client.enqueue_many([("noop", {"n": n}) for n in range(5)])
                assert len(ids) == 5
        assert clients[0].stats()
    finally:
        for client in clients:
            client.close()
    # Per round and client: one plain job and five in a batch; one keyed job per client.
    assert _count(admin_conn, schema) == 10 * 4 * (1 + 5) + 4


def test_async_client_enqueues_through_pgbouncer(bouncer, schema, admin_conn):
    settings = config.Settings(database_url=bouncer, schema=schema, pooled=True)

    async def produce() -> None:
        clients = [jobrun.AsyncClient(settings=settings) for _ in range(3)]
        try:
            for round_ in range(8):
                await asyncio.gather(*(c.enqueue("noop", {"r": round_}) for c in clients))
                await asyncio.gather(*(c.enqueue_many([("noop", None)] * 3) for c in clients))
        finally:
            for c in clients:
                await c.close()
    asyncio.run(produce())
    assert _count(admin_conn, schema) == 8 * 3 * 4


def test_master_refuses_a_pooled_url(bouncer, db_env):
    env = dict(db_env, JOBRUN_DATABASE_URL=bouncer, JOBRUN_POOLED="true", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "jobrun.worker.cli", "-A", "tests.apps.taskapp"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert done.returncode == 2
    assert "pooled" in done.stderr and "direct connection" in done.stderr
