"""The console tests' app: the task app plus one task whose outcome a test switches from outside.

``flaky_file`` fails while the file named by its payload does not exist and succeeds once it
does, so a test can let a job die, create the file, retry the job and watch it succeed.
"""

from __future__ import annotations

import os

import jobrun
from tests.apps.taskapp import app

__all__ = ["app"]


@app.task("flaky_file")
def flaky_file(job: jobrun.Job):
    print(f"looking for {job.payload}")  # the attempt's captured log
    if not os.path.exists(job.payload):
        raise RuntimeError(f"{job.payload} is missing")
    return {"found": job.payload}
