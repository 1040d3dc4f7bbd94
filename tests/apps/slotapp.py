"""The app the slot tests run (``-A tests.apps.slotapp``): tasks that share a child (async
handlers, and thread-safe plain ones), a task that keeps a child to itself, and tasks that
misbehave in a slot (hang in C, crash the child, ignore a cancel)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import jobrun

app = jobrun.App()
log = logging.getLogger("slotapp")


@app.task("wait")
async def wait(job: jobrun.Job):
    """An I/O job: waits, as an HTTP call would. Says where it ran and how many ran beside it."""
    started = time.time()
    await asyncio.sleep(float((job.payload or {}).get("s", 0.1)))
    return {"pid": os.getpid(), "started": started, "finished": time.time()}


@app.task("wait.sync", slots=True)
def wait_sync(job: jobrun.Job):
    """The same in a plain function declared thread-safe (the pool runs it)."""
    started = time.time()
    time.sleep(float((job.payload or {}).get("s", 0.1)))
    return {"pid": os.getpid(), "started": started, "finished": time.time(),
            "thread": threading.current_thread().name}


@app.task("alone")
def alone(job: jobrun.Job):
    """A plain task not declared thread-safe: it keeps its child to itself."""
    started = time.time()
    time.sleep(float((job.payload or {}).get("s", 0.1)))
    return {"pid": os.getpid(), "started": started, "finished": time.time(),
            "thread": threading.current_thread().name}


@app.task("chatty")
async def chatty(job: jobrun.Job):
    """Logs and prints its own id several times, yielding in between: each attempt's log must
    hold its own lines only."""
    for i in range(5):
        log.info("job %s line %d", job.id, i)
        print(f"print of job {job.id} #{i}")
        await asyncio.sleep(0.01)
    return {"id": job.id}


@app.task("chatty.sync", slots=True)
def chatty_sync(job: jobrun.Job):
    for i in range(5):
        log.info("job %s line %d", job.id, i)
        print(f"print of job {job.id} #{i}")
        time.sleep(0.01)
    return {"id": job.id}


@app.task("spin")
async def spin(job: jobrun.Job):
    """Runs until interrupted (a cancel, a lost lease, a time limit)."""
    while True:
        await asyncio.sleep(0.05)


@app.task("spin.sync", slots=True)
def spin_sync(job: jobrun.Job):
    """The same in a thread: Python code between short sleeps, so an interrupt lands."""
    while True:
        time.sleep(0.05)


@app.task("hang", slots=True, time_limit=1)
def hang(job: jobrun.Job):
    """Blocks in C for a long time: no interrupt reaches it; only killing the child ends it
    (its hard time limit is a second)."""
    threading.Event().wait(float((job.payload or {}).get("s", 3600)))
    return {"woke": True}


@app.task("crash")
async def crash(job: jobrun.Job):
    await asyncio.sleep(float((job.payload or {}).get("s", 0.2)))
    os._exit(9)


@app.task("slow", soft_time_limit=0.3)
async def slow(job: jobrun.Job):
    """Runs past its soft time limit; the handler sees SoftTimeLimit (as a cancel of its await)."""
    await asyncio.sleep(30)


@app.task("slow.sync", slots=True, soft_time_limit=0.3)
def slow_sync(job: jobrun.Job):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.02)
