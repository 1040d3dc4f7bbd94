"""A frozen holder of a transactional job holds nothing forever: two real masters (lease TTL
6 s); the one that runs a transactional job is SIGSTOPped (alone, or with its child) after the
handler's transaction took the effect key. The other master must finish the job within
TTL + reaper period + run time + a few seconds, with exactly one effect."""

from __future__ import annotations

import os
import signal
import time

import pytest
from psycopg import sql

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess, title

APP = "tests.apps.leaseapp"
TTL = 6.0
REAPER_PERIOD = TTL / 3  # the master's reaper runs every TTL/3 (between 0.5 and 5 s)
ARGS = ("-c", "1", "--poll-interval", "0.1", "--lease-ttl", str(TTL), "--grace", "5")


def _state(conn, schema, job_id) -> dict:
    """The job's status and attempts, and the pids that committed an effect for it."""
    return conn.execute(sql.SQL(
        "SELECT j.status, j.attempts, array(SELECT e.pid FROM {} e WHERE e.job_id = j.id) AS pids"
        " FROM {} j WHERE j.id = %s").format(sql.Identifier(schema, "effects"),
                                             sql.Identifier(schema, "jobs")), [job_id]).fetchone()


@pytest.mark.parametrize("freeze_child", [False, True], ids=["master", "master+child"])
def test_successor_finishes_despite_a_frozen_transactional_holder(db_env, tmp_path, client,
                                                                   effects_conn, schema,
                                                                   freeze_child):
    conn = effects_conn
    a = MasterProcess(db_env, tmp_path, *ARGS, app=APP)
    b = MasterProcess(db_env, tmp_path, *ARGS, app=APP)
    with a:
        a.wait_ready(concurrency=1)
        # The first attempt holds its transaction (and the effect key) open for a minute.
        job_id = client.enqueue("effect", {"sleep_first": 60}).job.id
        found: list[int] = []
        wait_for(lambda: found.extend(p for p in a.children() if f" job={job_id} " in title(p) + " ")
                 or found, timeout=15, message="A's child running the job")
        child_a = found[0]
        wait_for(lambda: conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction'"
            " AND datname = current_database()").fetchone(),
            timeout=10, message="A's child inside its transaction")
        with b:
            b.wait_ready(concurrency=1)
            os.kill(a.pid, signal.SIGSTOP)
            if freeze_child:
                os.kill(child_a, signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:
                budget = TTL + REAPER_PERIOD + 8.0  # run time ~0, and slack for a busy machine
                row = wait_for(lambda: (r := _state(conn, schema, job_id))["status"] == "succeeded" and r,
                               timeout=budget + 20, message="B to finish the job")
                took = time.monotonic() - frozen_at
                print(f"successor finished {took:.1f} s after the freeze")
                assert took < budget, f"took {took:.1f} s, budget {budget:.1f} s"
                assert len(row["pids"]) == 1 and row["pids"][0] != child_a
                assert row["attempts"] == 2
                assert "lease.session_ended" in b.stderr()
            finally:
                os.kill(a.pid, signal.SIGCONT)
                if freeze_child:
                    os.kill(child_a, signal.SIGCONT)
        # A's transaction is gone: no session of the test database is left inside one.
        assert conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE state = 'idle in transaction'"
                            " AND datname = current_database()").fetchone()["n"] == 0
        assert len(_state(conn, schema, job_id)["pids"]) == 1
