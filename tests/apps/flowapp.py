"""Tasks of workflow tests: steps that pass values along through their parents' results."""

from __future__ import annotations

import jobrun

app = jobrun.App()


@app.task("value")
def value(job: jobrun.Job):
    """Its payload, as its result."""
    return job.payload


@app.task("add")
def add(job: jobrun.Job):
    """Its payload plus the sum of its parents' results; the parents as it saw them."""
    parents = job.parents or {}
    return {"sum": job.payload + sum(_number(r) for r in parents.values()),
            "parents": sorted(parents)}


@app.task("fail")
def fail(job: jobrun.Job):
    raise jobrun.Permanent("fails on purpose")


def _number(result) -> int:
    return result["sum"] if isinstance(result, dict) else result
