"""OpenTelemetry for tests: one in-memory span exporter per test process (a process sets its
tracer provider once), and an OTLP/HTTP receiver on 127.0.0.1 that decodes what other
processes export to it."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@functools.cache
def memory_spans() -> Any:
    """The exporter of this process's spans (its provider is set on first use)."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@dataclass
class Received:
    """A span as it arrived: its service, ids as hex, name, kind and plain attributes."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    links: list[str] = field(default_factory=list)  # the trace ids linked to


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


@dataclass
class Receiver:
    """An OTLP/HTTP (protobuf) collector: POST /v1/traces and /v1/metrics."""

    spans: list[Received] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=dict)  # name -> data points
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "Receiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.take(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def take(self, path: str, body: bytes) -> None:
        if path == "/v1/traces":
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceRequest)

            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                service = next((_value(a.value) for a in rs.resource.attributes
                                if a.key == "service.name"), "")
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        got = Received(service, s.name, s.trace_id.hex(), s.span_id.hex(),
                                       s.parent_span_id.hex(), s.kind,
                                       {a.key: _value(a.value) for a in s.attributes},
                                       s.status.code, [link.trace_id.hex() for link in s.links])
                        with self.lock:
                            self.spans.append(got)
        elif path == "/v1/metrics":
            from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
                ExportMetricsServiceRequest)

            request = ExportMetricsServiceRequest()
            request.ParseFromString(body)
            for rm in request.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        with self.lock:
                            self.metrics.setdefault(m.name, []).extend(getattr(m, kind).data_points)

    def find(self, **match: Any) -> list[Received]:
        with self.lock:
            return [s for s in self.spans
                    if all(getattr(s, k) == v for k, v in match.items())]
