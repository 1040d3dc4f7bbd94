"""Tasks for the lease, fencing and exactly-once tests (tests/test_leases.py).

Transactional tasks write to the table ``<schema>.effects`` (created by the tests), so the
tests can count effects exactly.
"""

import os
import time

from psycopg import sql

import jobrun

app = jobrun.App()


def _effects_table():
    return sql.Identifier(os.environ["JOBRUN_SCHEMA"], "effects")


@app.task("effect", transactional=True)
def effect(job: jobrun.Job, tx):
    """Write one effect row, then sleep before committing (payload: sleep, or sleep_first for
    the first attempt only), and return a result of result_bytes characters."""
    payload = job.payload or {}
    tx.execute(sql.SQL("INSERT INTO {} (job_id, pid) VALUES (%s, %s)").format(_effects_table()),
               [job.id, os.getpid()])
    pause = float(payload.get("sleep", 0))
    if job.attempt == 1:
        pause += float(payload.get("sleep_first", 0))
    deadline = time.monotonic() + pause
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return {"pid": os.getpid(), "big": "x" * int(payload.get("result_bytes", 0))}


@app.task("sleepy")
def sleepy(job: jobrun.Job):
    """Sleep in small steps (so signals land promptly) and report the pid."""
    deadline = time.monotonic() + float((job.payload or {}).get("sleep", 1))
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return {"pid": os.getpid()}


@app.task("noop")
def noop(job: jobrun.Job):
    return None


@app.task("effect_logs_surrogate", transactional=True)
def effect_logs_surrogate(job: jobrun.Job, tx):
    """Log a file name os.listdir could return (a lone surrogate), then write one effect."""
    import logging

    logging.getLogger("leaseapp").warning("found %s", "\udcff")
    tx.execute(sql.SQL("INSERT INTO {} (job_id, pid) VALUES (%s, %s)").format(_effects_table()),
               [job.id, os.getpid()])
    return {"ok": True}
