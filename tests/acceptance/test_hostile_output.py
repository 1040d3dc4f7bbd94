"""Through a real master: hostile handler output and a payload the child cannot decode end as
failed attempts with their error, never as worker_lost, and no child dies."""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from jobrun.testing import wait_for
from tests.masterproc import MasterProcess


def test_hostile_output_is_a_failed_attempt(db_env, tmp_path, client, pg_dsn, schema):
    jobs = sql.Identifier(schema, "jobs")
    with psycopg.connect(pg_dsn, autocommit=True, row_factory=dict_row) as conn, \
            MasterProcess(db_env, tmp_path, "-c", "1", "--poll-interval", "0.1",
                          app="tests.apps.outputapp") as m:
        m.wait_ready(concurrency=1)
        child = m.children()[0]
        ids = [client.enqueue(task, max_attempts=1).job.id
               for task in ("unprintable", "surrogate_result", "surrogate_log", "deep_result")]
        # A row stored before the SQL functions checked nesting (or written by hand).
        ids.append(conn.execute(sql.SQL("INSERT INTO {} (queue, task, payload, max_attempts)"
                                        " VALUES ('default', 'echo', %s::jsonb, 1) RETURNING id")
                                .format(jobs), ["[" * 10_000 + "]" * 10_000]).fetchone()["id"])

        def finished():
            rows = conn.execute(sql.SQL("SELECT id, status FROM {} WHERE id = ANY(%s)").format(jobs),
                                [ids]).fetchall()
            return all(r["status"] in ("succeeded", "dead") for r in rows) and rows
        wait_for(finished, timeout=60, message="the jobs to finish")
        outcomes = {r["job_id"]: (r["outcome"], r["error"]) for r in conn.execute(
            sql.SQL("SELECT job_id, outcome, error FROM {} WHERE job_id = ANY(%s)").format(
                sql.Identifier(schema, "job_attempts")), [ids]).fetchall()}
        assert [outcomes[i][0] for i in ids] == ["failed", "failed", "succeeded", "failed", "failed"]
        assert "str() failed" in outcomes[ids[0]][1]
        assert "lone surrogate" in outcomes[ids[1]][1]
        assert "nested deeper than 100" in outcomes[ids[3]][1]
        assert outcomes[ids[4]][1].startswith("payload cannot be decoded")
        assert m.children() == [child]  # the same child ran them all
        assert "worker_lost" not in m.stderr() and "child.lost" not in m.stderr()
