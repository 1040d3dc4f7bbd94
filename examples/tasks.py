"""A small app to try jobrun with: `jobrun-master -A examples.tasks`."""

import time

import jobrun

app = jobrun.App()


@app.task("hello")
def hello(job: jobrun.Job):
    name = (job.payload or {}).get("name", "world")
    print(f"hello, {name} (job {job.id}, attempt {job.attempt})", flush=True)
    return {"greeted": name}


@app.task("sleep")
def sleep(job: jobrun.Job):
    time.sleep(float((job.payload or {}).get("seconds", 1)))
    return "slept"


@app.task("fail", max_attempts=3, retry_base=0.5)
def fail(job: jobrun.Job):
    raise RuntimeError(f"failing on purpose (attempt {job.attempt})")
