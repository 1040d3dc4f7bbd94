"""The app the benchmarks run: ``jobrun-master -A benchmarks.benchapp``.

``noop`` returns at once, so a drain of noop jobs measures the queue itself (claim,
dispatch over the pipe, completion). ``cpu`` burns ``payload["ms"]`` milliseconds of
pure-Python CPU time in the child (process CPU time, not wall time), so a drain of cpu jobs
shows whether the prefork children really run in parallel on the machine's cores.
``echo`` stands for a realistic job: it returns its payload's ``data`` as its result (so the
result is as large as the payload) and logs ``payload["log"]`` lines, which the child keeps as
the attempt's log. ``sleep`` (an ``async def`` awaiting ``asyncio.sleep``) and ``sleep-sync``
(a plain ``time.sleep``, declared thread-safe) wait ``payload["s"]`` seconds: jobs that hold a
slot while doing nothing, for benchmarks/memory.py.
"""

from __future__ import annotations

import asyncio
import logging
import time

import jobrun

app = jobrun.App()


@app.task("noop")
def noop(job: jobrun.Job):
    return None


@app.task("cpu")
def cpu(job: jobrun.Job):
    ms = float((job.payload or {}).get("ms", 5))
    clock = time.process_time
    end = clock() + ms / 1000.0
    x = 0
    while clock() < end:
        for i in range(100):  # pure-Python arithmetic between clock reads
            x += i * i
    return None


log = logging.getLogger("benchapp")


@app.task("echo")
def echo(job: jobrun.Job):
    payload = job.payload or {}
    for i in range(int(payload.get("log", 0))):
        log.info("echo line %d of job %d", i + 1, job.id)
    return {"data": payload.get("data")}


@app.task("sleep")
async def sleep(job: jobrun.Job):
    await asyncio.sleep(float((job.payload or {}).get("s", 1)))


@app.task("sleep-sync", slots=True)
def sleep_sync(job: jobrun.Job):
    time.sleep(float((job.payload or {}).get("s", 1)))
