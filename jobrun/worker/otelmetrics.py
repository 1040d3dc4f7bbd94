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

Every other family of the registry is an observable instrument read at each export (nothing
is added to the path that counts it): a counter ``jobrun_X_total`` as the observable counter
``jobrun.X``, a gauge ``jobrun_X`` as the observable gauge ``jobrun.X``, a histogram
``jobrun_X`` as the observable counters ``jobrun.X.count`` and ``jobrun.X.sum`` (an
observable histogram does not exist); labels become attributes.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client.metrics import MetricWrapperBase

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


def _reader(family: MetricWrapperBase, sample: str) -> Callable[[Any], Iterable[Any]]:
    """The callback of an observable instrument: ``family``'s samples named ``sample``."""
    from opentelemetry.metrics import Observation

    def observe(options: Any) -> Iterable[Any]:
        return [Observation(s.value, dict(s.labels))
                for metric in family.collect() for s in metric.samples if s.name == sample]
    return observe


def observe_the_rest(meter: Any, metrics: Any, teed: set[str]) -> list[str]:
    """Every family of ``metrics`` not in ``teed`` as observable instruments; their names."""
    names = []
    for family in vars(metrics).values():
        if not isinstance(family, MetricWrapperBase) or family._name in teed:
            continue
        base, help_ = family._name, family._documentation
        name = "jobrun." + base.removeprefix("jobrun_")
        if family._type == "counter":
            meter.create_observable_counter(name, [_reader(family, base + "_total")],
                                            description=help_)
            names.append(name)
        elif family._type == "gauge":
            meter.create_observable_gauge(name, [_reader(family, base)], description=help_)
            names.append(name)
        elif family._type == "histogram":
            for part in ("count", "sum"):
                meter.create_observable_counter(f"{name}.{part}",
                                                [_reader(family, f"{base}_{part}")],
                                                description=f"{help_} ({part})")
                names.append(f"{name}.{part}")
    return names


def mirror(metrics: Any) -> bool:
    """Tee ``metrics``' job families into OpenTelemetry instruments when metrics are on, and
    observe the others."""
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
    observe_the_rest(meter, metrics, {"jobrun_jobs", "jobrun_jobs_dead",
                                      "jobrun_job_duration_seconds"})
    return True
