"""SIGHUP re-reads the config file and every part of the master honours the new settings."""

from __future__ import annotations

import signal
import time

from psycopg import sql

from jobrun.testing import wait_for

from tests.masterproc import MasterProcess


def write_config(path, **values) -> None:
    lines = []
    for key, value in values.items():
        if isinstance(value, list):
            value = "[" + ", ".join(f'"{v}"' for v in value) + "]"
        elif isinstance(value, str):
            value = f'"{value}"'
        lines.append(f"{key} = {value}")
    path.write_text("\n".join(lines) + "\n")


def lease_of(db, job_id: int) -> dict:
    """The job's status and the seconds its lease has left (None without one), read by one
    statement: read apart, the job may finish between the two and its lease be gone."""
    [row] = db.rows("SELECT status, extract(epoch FROM lease_expires_at - now())::float8 AS left"
                    " FROM {s}.jobs WHERE id = %s", (job_id,))
    return row


def test_hup_applies_queues_ttl_and_concurrency(db_env, tmp_path, client, db):
    db.conn.execute(sql.SQL("INSERT INTO {}.queues (name) VALUES ('other')").format(
        sql.Identifier(db.schema)))
    conf = tmp_path / "jobrun.toml"
    write_config(conf, queues=["default"], lease_ttl=3, concurrency=1, poll_interval=0.1)
    env = {**db_env, "JOBRUN_CONFIG": str(conf)}
    with MasterProcess(env, tmp_path) as m:
        m.wait_ready(1)
        waiting = client.enqueue("pid", queue="other").job.id
        first = client.enqueue("pid").job.id
        db.wait_status(first)
        old_child = db.result(first)["pid"]
        assert db.job(waiting)["status"] == "queued"  # not one of its queues yet

        write_config(conf, queues=["default", "other"], lease_ttl=30, concurrency=2,
                     poll_interval=0.1)
        m.signal(signal.SIGHUP)
        db.wait_status(waiting)  # the claimer took the new queue
        # The new concurrency, in the new generation: two children, the old one gone (two
        # alone may be the old child and a new one while the other is being forked).
        wait_for(lambda: len(kids := m.children()) == 2 and old_child not in kids, timeout=15,
                 message="two children of the new generation")
        long = client.enqueue("sleep", 2.5).job.id
        claimed = wait_for(lambda: (row := lease_of(db, long))["status"] == "leased" and row,
                           timeout=20, message="the long job to be leased")
        assert claimed["left"] > 20  # claimed with the new TTL
        # Renewed with the new TTL too (the old heartbeater renewed to 3 s every second).
        checks = 0
        while (row := lease_of(db, long))["status"] == "leased":
            assert row["left"] > 20
            checks += 1
            since = time.monotonic()
            wait_for(lambda: time.monotonic() - since > 0.2, message="the next look")
        assert checks >= 3
        db.wait_status(long)
        assert db.job(long)["status"] == "succeeded"
        m.signal(signal.SIGTERM)
        assert m.wait(20) == 0


def test_hup_with_an_invalid_file_keeps_the_running_settings(db_env, tmp_path, client, db):
    conf = tmp_path / "jobrun.toml"
    write_config(conf, queues=["default"], concurrency=2, poll_interval=0.1)
    env = {**db_env, "JOBRUN_CONFIG": str(conf)}
    with MasterProcess(env, tmp_path) as m:
        m.wait_ready(2)
        children = sorted(m.children())
        write_config(conf, queues=["default"], concurrency=0, poll_interval=0.1)
        m.signal(signal.SIGHUP)
        wait_for(lambda: "reload.failed" in m.stderr(), timeout=15, message="reload.failed")
        assert f"{conf}: concurrency must be at least 1" in m.stderr()
        job = client.enqueue("pid").job.id
        db.wait_status(job)
        assert db.result(job)["pid"] in children  # the old generation serves on
        assert sorted(m.children()) == children
        m.signal(signal.SIGTERM)
        assert m.wait(20) == 0
