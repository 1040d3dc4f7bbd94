"""W3C trace context and spans, when OpenTelemetry is installed (``pip install jobrun[otel]``).

The spans of one job, in the names of OpenTelemetry's messaging conventions
(``messaging.system`` = jobrun, ``messaging.destination.name`` = the queue)::

    [producer's span]                     the caller's, or the web request's (SERVER)
      jobrun.enqueue TASK   PRODUCER      stores its own traceparent on the job
        jobrun.run TASK     CONSUMER      one per attempt, in the child: retries are siblings
    jobrun.complete         INTERNAL      in the master: one per completion batch (its size),
                                          linked to the trace of each job it settles

A producer outside any trace starts one when an SDK records spans; with the API alone (no
SDK) nothing is recorded and, outside a span, nothing is stored on the job. Without
OpenTelemetry every function here costs one cached look-up: ``load()`` is None and the
callers take their plain path (the producer's operation is returned as it is, the completer
and the child open no span).

Which process exports is the application's choice: it configures the SDK (a TracerProvider
with an exporter) where its code runs, in its app module for the children and the fork server,
or with ``opentelemetry-instrument`` for any command. A child leaves through ``os._exit``, so
it flushes the provider first (``flush``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
from typing import Any, Callable, Iterator, Mapping

TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
SYSTEM = "jobrun"
_started = False  # a span was made in this process: flush before leaving


@functools.cache
def load() -> tuple[Any, Any] | None:
    """(opentelemetry.trace, its W3C propagator class), imported on first use, or None without
    the extra. On first use: an untraced producer or job never needs it, and its import costs
    a fresh process ~15 ms (the fork server imports it once its first children are out)."""
    try:  # optional dependency
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:  # pragma: no cover - exercised when the extra is absent
        return None
    if enabled():  # the fork server calls this: its children then find the SDK imported
        with contextlib.suppress(ImportError):  # configure() says what is missing
            _sdk_modules()
    return trace, TraceContextTextMapPropagator


def valid_traceparent(text: str | None) -> str | None:
    """``text`` if it is a W3C traceparent (version 00 form, non-zero ids), else None: a
    malformed one is dropped, as the recommendation says (the receiver starts a new trace)."""
    if not text or len(text) > 128:
        return None
    text = text.strip()
    match = TRACEPARENT.fullmatch(text)
    if match is None or match[1] == "ff" or not int(match[2], 16) or not int(match[3], 16):
        return None
    return text


def current_traceparent() -> str | None:
    """The traceparent of the current span, or None outside a (sampled or not) valid span."""
    otel = load()
    if otel is None:
        return None
    trace, TraceContextTextMapPropagator = otel
    span = trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def tracer() -> Any:
    from jobrun import __version__

    return load()[0].get_tracer("jobrun", __version__)  # type: ignore[index]


def _traceparent_of(span: Any) -> str | None:
    trace, TraceContextTextMapPropagator = load()  # type: ignore[misc]
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


# --- OTEL_ENABLED=true: jobrun sets up the SDK -------------------------------------------

def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get("OTEL_ENABLED", "").strip().lower() in ("1", "true", "yes", "on")


def configure(service: str, environ: Mapping[str, str] = os.environ) -> bool:
    """With ``OTEL_ENABLED=true``, and no SDK provider set up by the process already (an app
    module, ``opentelemetry-instrument``): set up a tracer and a meter provider exporting over
    OTLP/HTTP, configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_SERVICE_NAME, OTEL_BSP_SCHEDULE_DELAY, OTEL_METRIC_EXPORT_INTERVAL...). Called by
    jobrun-master, `jobrun web` and each child (after the fork: the fork server stays
    single-threaded). True if it did; an InvalidInput naming the package when one is missing."""
    if not enabled(environ):
        return False
    global _started
    try:
        _sdk_modules()
    except ImportError as exc:
        from jobrun.errors import InvalidInput

        raise InvalidInput(f"OTEL_ENABLED=true needs the OpenTelemetry SDK and its OTLP/HTTP"
                           f" exporter (pip install 'jobrun[otel-export]'): cannot import"
                           f" {exc.name}") from None
    from opentelemetry import metrics, trace
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({} if environ.get("OTEL_SERVICE_NAME") else
                               {"service.name": service})
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        _started = True
    if not isinstance(metrics.get_meter_provider(), MeterProvider):
        metrics.set_meter_provider(MeterProvider(
            resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]))
    return True


def _sdk_modules() -> None:
    """Import what configure() sets up (no thread is started by the imports)."""
    import opentelemetry.exporter.otlp.proto.http.metric_exporter  # noqa: F401
    import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    import opentelemetry.sdk.metrics.export  # noqa: F401
    import opentelemetry.sdk.resources  # noqa: F401
    import opentelemetry.sdk.trace.export  # noqa: F401


def meter() -> Any:
    """jobrun's OpenTelemetry meter when metrics are on (OTEL_ENABLED=true, or an SDK meter
    provider set up by the process), else None: then nothing is mirrored."""
    if load() is None:
        return None
    from opentelemetry import metrics

    from jobrun import __version__

    provider = metrics.get_meter_provider()
    if not enabled() and not type(provider).__module__.startswith("opentelemetry.sdk"):
        return None
    return provider.get_meter("jobrun", __version__)


# --- producers ----------------------------------------------------------------------------

def producer(operation: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate an enqueue operation of jobrun.ops (a generator taking ``traceparent``): when
    OpenTelemetry is installed it runs inside a PRODUCER span whose traceparent is the one
    stored on the job(s). The span's parent is the current span, else the ``traceparent``
    given (a web request's header, where the web process has no SDK of its own). Not a
    current span: an operation is a generator, driven across awaits, and a span made current
    inside one would be detached in another context."""

    def decorate(op: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(op)

        @functools.wraps(op)
        def traced(*args: Any, **kwargs: Any) -> Any:
            otel = load()
            if otel is None:
                return op(*args, **kwargs)
            if not _recording(otel[0]):  # the API alone: no span, the current context if any
                traceparent = current_traceparent() or kwargs.get("traceparent")
                return op(*args, **{**kwargs, "traceparent": traceparent})
            return _producing(op, operation, signature.bind(*args, **kwargs), kwargs)

        return traced

    return decorate


def _recording(trace: Any) -> bool:
    """Whether an SDK (or any real provider) is set up: with the API's own provider no span
    is ever recorded, and making one costs an enqueue ~20 us for nothing."""
    return not isinstance(trace.get_tracer_provider(),
                          (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _producing(op: Callable[..., Any], operation: str, bound: inspect.BoundArguments,
               kwargs: dict[str, Any]) -> Any:
    global _started
    trace, TraceContextTextMapPropagator = load()  # type: ignore[misc]
    given = kwargs.get("traceparent")
    parent = None
    if given and not trace.get_current_span().get_span_context().is_valid:
        parent = TraceContextTextMapPropagator().extract({"traceparent": given})
    arguments = bound.arguments
    queue = str(arguments.get("queue", "default"))
    task = arguments.get("task")
    attributes = {"messaging.system": SYSTEM, "messaging.destination.name": queue,
                  "messaging.operation.type": "send", "messaging.operation.name": operation}
    if task is not None:
        attributes["jobrun.task"] = str(task)
    name = f"jobrun.{operation} {task}" if task is not None else f"jobrun.{operation}"
    span = tracer().start_span(name, context=parent, kind=trace.SpanKind.PRODUCER,
                               attributes=attributes)
    _started = True
    traceparent = _traceparent_of(span) or given
    try:
        result = yield from op(*bound.args, **{**bound.kwargs, "traceparent": traceparent})
    except GeneratorExit:
        span.end()
        raise
    except BaseException as exc:
        span.record_exception(exc)
        span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        span.end()
        raise
    job = getattr(result, "job", None)
    if job is not None:
        span.set_attribute("messaging.message.id", str(job.id))
        span.set_attribute("jobrun.job_id", job.id)
        span.set_attribute("jobrun.created", bool(result.created))
    elif isinstance(result, list):
        span.set_attribute("messaging.batch.message_count", len(result))
    span.end()
    return result


# --- the attempt, in the child ----------------------------------------------------------------

def _ignore(result: dict[str, Any]) -> None:
    return None


@contextlib.contextmanager
def attempt_span(job: Any, traceparent: str | None) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Run one attempt inside a CONSUMER span that continues the producer's trace, if there is
    one; yields a function that records the attempt's result (its outcome, and its error as
    the span's status). ``job``: a jobrun.Job (id, task, queue, attempt, token)."""
    global _started
    otel = None if not traceparent else load()
    if otel is None:
        yield _ignore
        return
    trace, TraceContextTextMapPropagator = otel
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    _started = True
    with tracer().start_as_current_span(
        f"jobrun.run {job.task}", context=context, kind=trace.SpanKind.CONSUMER,
        record_exception=False, set_status_on_exception=False,
        attributes={"messaging.system": SYSTEM, "messaging.destination.name": job.queue,
                    "messaging.operation.type": "process", "messaging.operation.name": "run",
                    "messaging.message.id": str(job.id), "jobrun.job_id": job.id,
                    "jobrun.attempt": job.attempt, "jobrun.task": job.task,
                    "jobrun.lease_token": job.token},
    ) as span:

        def finish(result: dict[str, Any]) -> None:
            outcome = result.get("outcome")
            span.set_attribute("jobrun.outcome", str(outcome))
            if outcome in ("failed", "timeout"):
                error = str(result.get("error") or outcome)
                span.add_event("exception", {"exception.message": error,
                                             "exception.stacktrace": result.get("traceback") or ""})
                span.set_status(trace.Status(trace.StatusCode.ERROR, error[:200]))

        yield finish


def flush(timeout_ms: int = 2000) -> None:
    """Export what this process's provider still holds (a process that leaves through
    ``os._exit``); nothing when no span was made here."""
    if not _started or load() is None:
        return
    provider = load()[0].get_tracer_provider()  # type: ignore[index]
    force = getattr(provider, "force_flush", None)
    if force is not None:
        try:
            force(timeout_ms)
        except Exception:  # noqa: BLE001 - an exporter's failure must not keep a child alive
            pass


# --- the completion, in the master --------------------------------------------------------------

MAX_LINKS = 128  # the SDK's default limit of links per span


def _links(trace: Any, traceparents: list[str]) -> list[Any]:
    links = []
    for text in traceparents:
        match = TRACEPARENT.fullmatch(text)
        if match is not None:
            links.append(trace.Link(trace.SpanContext(
                int(match[2], 16), int(match[3], 16), is_remote=True,
                trace_flags=trace.TraceFlags(int(text[-2:], 16) & 1))))
    return links


@contextlib.contextmanager
def _completion(otel: tuple[Any, Any], batch: list[Any]) -> Iterator[Any]:
    trace = otel[0]
    traced = [c.traceparent for c in batch if getattr(c, "traceparent", None)][:MAX_LINKS]
    with tracer().start_as_current_span(
        "jobrun.complete", kind=trace.SpanKind.INTERNAL, links=_links(trace, traced),
        attributes={"messaging.system": SYSTEM, "messaging.operation.type": "settle",
                    "messaging.operation.name": "complete",
                    "messaging.batch.message_count": len(batch)}) as span:
        yield span


_NOTHING = contextlib.nullcontext()


def completion_span(batch: list[Any]) -> contextlib.AbstractContextManager[Any]:
    """A span around one completion batch (its size; a link to the trace of each job that has
    one, the first MAX_LINKS: the batch settles jobs of many traces, so it belongs to none);
    a shared no-op context without OpenTelemetry (one cached call per batch)."""
    otel = load()
    return _NOTHING if otel is None or not _recording(otel[0]) else _completion(otel, batch)
