"""The app of the spawning tests (tests/acceptance/test_spawning.py): what a child inherited,
and which process imported the app. It has taskapp's tasks too.

SPAWNAPP_VERSION_FILE: the file whose text, read at import, ``spawn.info`` reports as the
code's version (new code for the reload tests); SPAWNAPP_BROKEN_IF: while the file it names
exists, the import fails.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import jobrun

_flag = os.environ.get("SPAWNAPP_BROKEN_IF")
if _flag and Path(_flag).exists():
    raise ImportError("spawnapp is broken on purpose (its flag file exists)")

from tests.apps.taskapp import app  # noqa: E402

IMPORTED_BY = os.getpid()
_version_file = os.environ.get("SPAWNAPP_VERSION_FILE")
VERSION = Path(_version_file).read_text().strip() if _version_file else ""


def _disposition(signum: int) -> str:
    handler = signal.getsignal(signum)
    if handler == signal.SIG_DFL:
        return "default"
    if handler == signal.SIG_IGN:
        return "ignore"
    return "handler" if handler is not None else "unknown"


@app.task("spawn.info")
def info(job: jobrun.Job):
    catchable = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
    return {"pid": os.getpid(), "ppid": os.getppid(), "imported_by": IMPORTED_BY,
            "version": VERSION, "random": random.random(),
            "signals": {signal.Signals(s).name: _disposition(s) for s in catchable
                        if s < signal.SIGRTMIN},
            "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ()))}


@app.task("spawn.window")
def window(job: jobrun.Job):
    """Sleeps ``payload`` seconds; says when it ran (wall clock) and in which process."""
    start = time.time()
    time.sleep(float(job.payload or 0))
    return {"pid": os.getpid(), "start": start, "end": time.time()}
