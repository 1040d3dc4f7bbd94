"""The master's job metrics as OpenTelemetry instruments too, when they are on.

On when ``OTEL_ENABLED=true`` (jobrun then sets up the SDK: jobrun.tracing.configure) or when
the process has an SDK meter provider of its own. Then the families the dispatcher counts each
job in (``jobrun_jobs``, ``jobrun_jobs_dead``, ``jobrun_job_duration_seconds``) are replaced on
the Metrics object by tees: a labelled child that increments (or observes) the Prometheus
series and the OpenTelemetry instrument alike, with the labels as attributes. The Prometheus
registry keeps the original families, so /metrics is unchanged. Off, nothing is replaced and
the dispatcher's path is exactly the Prometheus one.

    Prometheus                      OpenTelemetry
    jobrun_jobs_total               jobrun.jobs           counter    queue, task, outcome
    jobrun_jobs_dead_total          jobrun.jobs.dead      counter    queue, task
    jobrun_job_duration_seconds     jobrun.job.duration   histogram  queue, task (s)
"""

from __future__ import annotations

from typing import Any

from jobrun import tracing


class _Child:
    __slots__ = ("series", "instrument", "attributes")

    def __init__(self, series: Any, instrument: Any, attributes: dict[str, str]) -> None:
        self.series, self.instrument, self.attributes = series, instrument, attributes

    def inc(self, amount: float = 1) -> None:
        self.series.inc(amount)
        self.instrument.add(amount, self.attributes)

    def observe(self, value: float) -> None:
        self.series.observe(value)
        self.instrument.record(value, self.attributes)


class Tee:
    """A Prometheus family whose labelled children also feed ``instrument``."""

    def __init__(self, family: Any, instrument: Any, names: tuple[str, ...]) -> None:
        self.family, self.instrument, self.names = family, instrument, names

    def labels(self, *values: str) -> _Child:
        return _Child(self.family.labels(*values), self.instrument,
                      dict(zip(self.names, values)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.family, name)


def mirror(metrics: Any) -> bool:
    """Tee ``metrics``' job families into OpenTelemetry instruments when metrics are on."""
    meter = tracing.meter()
    if meter is None:
        return False
    from jobrun.worker.metrics import DURATION_BUCKETS

    metrics.jobs = Tee(metrics.jobs, meter.create_counter(
        "jobrun.jobs", unit="{attempt}", description="Attempts ended, by outcome"),
        ("queue", "task", "outcome"))
    metrics.dead = Tee(metrics.dead, meter.create_counter(
        "jobrun.jobs.dead", unit="{job}", description="Jobs that ended dead"), ("queue", "task"))
    metrics.duration = Tee(metrics.duration, meter.create_histogram(
        "jobrun.job.duration", unit="s", description="Attempt run time in the child",
        explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS)), ("queue", "task"))
    return True
