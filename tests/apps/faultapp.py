"""Tasks for the fault-injection suite (tests/acceptance/test_faults.py): ``-A tests.apps.faultapp``.

Every handler first appends a row to ``<schema>.starts`` (job id, attempt, lease token, pid,
time) on a connection of its own (autocommit, straight to PostgreSQL through
``FAULTS_RECORD_DSN``, never through a proxy the test may freeze), and only then does its work.
So the record holds every start a child got as far as running the handler, whatever happens to
the attempt afterwards; the checker compares it with ``max_attempts``.

``effect`` is transactional: its effect is one row in ``<schema>.effects`` keyed by job id,
written in the transaction jobrun commits together with the job's success.
"""

from __future__ import annotations

import os
import time
import uuid

import psycopg
from psycopg import sql

import jobrun

app = jobrun.App()

_recorder: list[psycopg.Connection] = []  # this child's record connection, opened on first use


def _table(name: str) -> sql.Identifier:
    return sql.Identifier(os.environ["JOBRUN_SCHEMA"], name)


def record_start(job: jobrun.Job) -> None:
    """Append this start to the record; keep trying while the database restarts (a start that
    is not recorded must not run: the record would then undercount)."""
    deadline = time.monotonic() + 60
    start_id = uuid.uuid4()  # a retry after an unanswered insert must not record it twice
    while True:
        try:
            if not _recorder or _recorder[0].closed or _recorder[0].broken:
                _recorder[:] = [psycopg.connect(os.environ["FAULTS_RECORD_DSN"], autocommit=True,
                                                application_name="faults-recorder",
                                                connect_timeout=2)]
            _recorder[0].execute(
                sql.SQL("INSERT INTO {} (start_id, job_id, attempt, token, pid)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (start_id) DO NOTHING")
                .format(_table("starts")), [start_id, job.id, job.attempt, job.token, os.getpid()])
            return
        except psycopg.OperationalError:
            if _recorder:
                _recorder[0].close()
                _recorder.clear()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # the database is restarting; retry its connection


def _work(job: jobrun.Job) -> None:
    """Sleep in small steps (signals land promptly) for payload["sleep"] seconds."""
    deadline = time.monotonic() + float((job.payload or {}).get("sleep", 0))
    while time.monotonic() < deadline:
        time.sleep(0.01)


@app.task("record")
def record(job: jobrun.Job):
    record_start(job)
    _work(job)
    return {"pid": os.getpid()}


@app.task("effect", transactional=True)
def effect(job: jobrun.Job, tx):
    record_start(job)
    tx.execute(sql.SQL("INSERT INTO {} (job_id, pid) VALUES (%s, %s)").format(_table("effects")),
               [job.id, os.getpid()])
    _work(job)
    return {"pid": os.getpid()}


@app.task("record.async")
async def record_async(job: jobrun.Job):
    """``record`` as an async handler: with --slots it shares its child with others."""
    import asyncio

    record_start(job)
    await asyncio.sleep(float((job.payload or {}).get("sleep", 0)))
    return {"pid": os.getpid()}


@app.task("record.thread", slots=True)
def record_thread(job: jobrun.Job):
    """``record`` declared thread-safe: with --slots it runs on its child's pool."""
    record_start(job)
    _work(job)
    return {"pid": os.getpid()}
@app.task("doomed")
def doomed(job: jobrun.Job):
    """A parent that fails for good, so the jobs after it are cancelled (workflows)."""
    record_start(job)
    raise jobrun.Permanent("doomed on purpose")
