"""Tasks for the observability tests: logging, printing, failing."""

import logging
import time

import jobrun

app = jobrun.App()
log = logging.getLogger("obsapp")


@app.task("chatty")
def chatty(job: jobrun.Job):
    payload = job.payload or {}
    for i in range(int(payload.get("lines", 1))):
        log.info("line %d of job %d", i, job.id)
    log.warning("a warning from job %d", job.id)
    print(f"printed by job {job.id}")
    return {"ok": True}


@app.task("noop")
def noop(job: jobrun.Job):
    return None


@app.task("boom", max_attempts=1)
def boom(job: jobrun.Job):
    log.error("about to fail")
    raise ValueError("boom")


@app.task("short")
def short(job: jobrun.Job):
    time.sleep(0.007)  # long enough for the first duration bucket (5 ms), short enough to prefetch
