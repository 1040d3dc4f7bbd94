"""The test app the master integration tests run: ``-A tests.apps.taskapp``.

Every task does one small, observable thing (sleep, fail, crash, burn CPU, hold memory, report
its pid or signal disposition) so tests can provoke each path of the master and read the
outcome back from the database.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import time

import jobrun

app = jobrun.App()

_hoard: list[bytearray] = []  # memhog keeps its allocations here so RSS stays high


@app.task("noop")
def noop(job: jobrun.Job):
    return {"ok": True, "payload": job.payload}


@app.task("sleep")
def sleep(job: jobrun.Job):
    time.sleep(float(job.payload or 0))
    return {"slept": job.payload, "pid": os.getpid()}


@app.task("fail")
def fail(job: jobrun.Job):
    raise RuntimeError(f"boom on attempt {job.attempt}")


@app.task("permanent")
def permanent(job: jobrun.Job):
    raise jobrun.Permanent("this job can never succeed")


@app.task("retry_later")
def retry_later(job: jobrun.Job):
    raise jobrun.Retry(delay=float(job.payload or 60), reason="not yet")


def _crash(how: str) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files in the checkout
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "sigsegv":
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "exit":
        os._exit(7)
    elif how == "exit3":  # the code a child uses for "the app failed to load"
        os._exit(3)
    raise ValueError(f"unknown crash {how!r}")


@app.task("crash")
def crash(job: jobrun.Job):
    how = (job.payload or {}).get("how", "sigkill")
    if how == "none":  # a quick run, so the master learns this task is short
        return "spared"
    _crash(how)


@app.task("crash_once")
def crash_once(job: jobrun.Job):
    if job.attempt == 1:
        _crash("sigkill")
    return {"attempt": job.attempt}


@app.task("cpu")
def cpu(job: jobrun.Job):
    deadline = time.perf_counter() + float(job.payload or 10) / 1000.0
    n = 0
    while time.perf_counter() < deadline:
        n += 1
    return {"loops": n}


@app.task("memhog")
def memhog(job: jobrun.Job):
    size = int(job.payload or 64) * 1024 * 1024
    _hoard.append(bytearray(b"\x01") * size)  # written, so the pages are resident
    return {"pid": os.getpid(), "mib": int(job.payload or 64)}


@app.task("soft_limited", soft_time_limit=0.5)
def soft_limited(job: jobrun.Job):
    """Payload {"catch": true}: return whether SoftTimeLimit arrived; else let it propagate."""
    catch = bool((job.payload or {}).get("catch"))
    started = time.monotonic()
    try:
        time.sleep(10)
    except jobrun.SoftTimeLimit:
        if not catch:
            raise
        return {"soft_time_limit": True, "after": round(time.monotonic() - started, 3)}
    return {"soft_time_limit": False}


@app.task("hard_limited", time_limit=1)
def hard_limited(job: jobrun.Job):
    time.sleep(30)
    return {"finished": True}


@app.task("pid")
def pid(job: jobrun.Job):
    return {"pid": os.getpid(), "ppid": os.getppid()}


@app.task("async_noop")
async def async_noop(job: jobrun.Job):
    await asyncio.sleep(0.01)
    return {"async": True, "payload": job.payload}


@app.task("ignore_int")
def ignore_int(job: jobrun.Job):
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN
