"""A transactional handler whose log holds a lone surrogate still commits its effect and
success (the log is stored with the surrogate escaped)."""

from __future__ import annotations

from psycopg import sql

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess


def test_surrogate_in_a_transactional_log(db_env, tmp_path, client, effects_conn, schema):
    conn = effects_conn
    with MasterProcess(db_env, tmp_path, "-c", "1", "--poll-interval", "0.1",
                       app="tests.apps.leaseapp") as m:
        m.wait_ready(concurrency=1)
        job_id = client.enqueue("effect_logs_surrogate", max_attempts=1).job.id
        row = wait_for(lambda: conn.execute(sql.SQL(
            "SELECT a.outcome, a.log FROM {} a WHERE a.job_id = %s").format(
                sql.Identifier(schema, "job_attempts")), [job_id]).fetchone(),
            timeout=30, message="the attempt to be recorded")
        assert row["outcome"] == "succeeded", row
        assert "found \\udcff" in row["log"]
        assert conn.execute(sql.SQL("SELECT count(*) AS n FROM {} WHERE job_id = %s").format(
            sql.Identifier(schema, "effects")), [job_id]).fetchone()["n"] == 1
