"""A small OTLP/HTTP receiver on loopback: it decodes the protobuf export requests that
workers send to `/v1/traces` and `/v1/metrics` and keeps what they carried.

It stands outside the worker processes, so a worker killed with kill -9 cannot take the
spans it already exported with it: what the receiver holds is what an operator's
collector would have received.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    service: str
    events: list[str] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


class OtlpReceiver:
    """`start()`, point `OTEL_EXPORTER_OTLP_ENDPOINT` at `url`, read `spans` and `metric_names`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[ReceivedSpan] = []
        self.metric_names: set[str] = set()
        self.requests = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(self.path, body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def take(self, path: str, body: bytes) -> None:
        with self.lock:
            self.requests += 1
            if path == "/v1/traces":
                self._take_traces(body)
            elif path == "/v1/metrics":
                self._take_metrics(body)

    def _take_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = _attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(), attributes=_attributes(span.attributes),
                            status_code=span.status.code, service=service, events=[e.name for e in span.events],
                        )
                    )  # fmt: skip

    def _take_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                self.metric_names.update(m.name for m in scope_metrics.metrics)

    def spans_of(self, session_id: str) -> list[ReceivedSpan]:
        """The spans of the traces that a session's spans belong to (sub-agents included)."""
        with self.lock:
            spans = list(self.spans)
        traces = {s.trace_id for s in spans if s.attributes.get("gen_ai.conversation.id") == session_id}
        return [s for s in spans if s.trace_id in traces]
