"""Tasks run by remote workers in the worker protocol's tests (`jobrun worker -A
tests.apps.remoteapp`): sync and async handlers, failures, a log line, and jobs that wait for
a file the test creates (so a test can stop or kill a worker while they run)."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import jobrun

app = jobrun.App()
log = logging.getLogger("remoteapp")


@app.task("remote.add", queue="remote")
def add(job: jobrun.Job):
    log.warning("adding %s", job.payload)
    return {"sum": sum(job.payload), "pid": os.getpid()}


@app.task("remote.echo", queue="remote")
async def echo(job: jobrun.Job):
    await asyncio.sleep(0)
    return {"echo": job.payload, "attempt": job.attempt}


@app.task("remote.broken", queue="remote", max_attempts=2, retry_base=0.01, retry_cap=0.01)
def broken(job: jobrun.Job):
    raise RuntimeError("always broken")


@app.task("remote.refuse", queue="remote")
def refuse(job: jobrun.Job):
    raise jobrun.Permanent("refused for good")


@app.task("remote.wait_async", queue="remote")
async def wait_async(job: jobrun.Job):
    """Runs until the file named by the payload exists (it marks its start with `.started`)."""
    open(job.payload + ".started", "w").close()
    while not os.path.exists(job.payload):
        await asyncio.sleep(0.02)
    return "done"


@app.task("remote.wait_sync", queue="remote")
def wait_sync(job: jobrun.Job):
    open(job.payload + ".started", "w").close()
    while not os.path.exists(job.payload):
        time.sleep(0.02)
    return "done"


@app.task("remote.overtime", queue="remote", time_limit=0.2, max_attempts=1)
async def overtime(job: jobrun.Job):
    await asyncio.sleep(60)


@app.task("remote.hostile", queue="remote", max_attempts=1)
def hostile(job: jobrun.Job):
    log.warning("a NUL \x00 and half a pair \ud800 in a log line")
    raise RuntimeError("a NUL \x00 in an error")


@app.task("remote.nap", queue="remote")
def nap(job: jobrun.Job):
    """Holds its slot for ``payload`` seconds: a job a fault can land in the middle of."""
    time.sleep(float(job.payload))
    return {"slept": job.payload}
