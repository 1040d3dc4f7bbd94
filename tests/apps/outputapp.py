"""Handlers whose output is hostile to the child: an exception that cannot be printed, text
that is not valid UTF-8, results too deep or too large to send. Each must end as a failed
attempt with a clear error while the child lives on."""

from __future__ import annotations

import logging

import jobrun
from jobrun import protocol

app = jobrun.App()


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ refuses")


@app.task("ok")
def ok(job: jobrun.Job):
    return {"ok": True}


@app.task("unprintable")
def unprintable(job: jobrun.Job):
    raise Unprintable()


@app.task("surrogate_result")
def surrogate_result(job: jobrun.Job):
    return {"name": "\udcff"}  # what os.listdir gives for an undecodable file name


@app.task("surrogate_log")
def surrogate_log(job: jobrun.Job):
    logging.getLogger("outputapp").warning("listing %s", "\udcff")
    return {"logged": True}


@app.task("surrogate_error")
def surrogate_error(job: jobrun.Job):
    raise ValueError("no such file: \udcff")


@app.task("deep_result")
def deep_result(job: jobrun.Job):
    value: list = []
    for _ in range(10_000):
        value = [value]
    return value


@app.task("huge_result")
def huge_result(job: jobrun.Job):
    return "x" * (protocol.MAX_FRAME + 1)


@app.task("echo")
def echo(job: jobrun.Job):
    return {"type": type(job.payload).__name__}
