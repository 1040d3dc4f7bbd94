"""W3C trace context, when OpenTelemetry is installed (``pip install jobrun[otel]``).

A producer inside a span stores its ``traceparent`` on the job; nothing is stored for an
untraced producer. The child runs each attempt in a span whose parent is that context, so an
attempt is a child of the enqueueing span and retries are siblings in the same trace.
Without OpenTelemetry both ends are no-ops.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator


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
    return trace, TraceContextTextMapPropagator


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


@contextlib.contextmanager
def attempt_span(task: str, job_id: int, attempt: int, queue: str,
                 traceparent: str | None) -> Iterator[None]:
    """Run one attempt inside a span that continues the producer's trace, if there is one."""
    otel = None if not traceparent else load()
    if otel is None:
        yield
        return
    trace, TraceContextTextMapPropagator = otel
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    tracer = trace.get_tracer("jobrun")
    with tracer.start_as_current_span(
        f"jobrun.run {task}", context=context, kind=trace.SpanKind.CONSUMER,
        attributes={"messaging.system": "jobrun", "messaging.destination.name": queue,
                    "jobrun.job_id": job_id, "jobrun.attempt": attempt, "jobrun.task": task},
    ) as span:
        try:
            yield
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            raise
