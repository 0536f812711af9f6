"""An OTLP/HTTP trace receiver for the tracing tests: a real HTTP server in the test's process that decodes every
span it is sent (opentelemetry-proto), and the fixture that points the service's OTEL_* settings at it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as trace_service


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: every span it is sent, decoded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.spans: list[Any] = []
        self.lock = threading.Lock()

    def received(self, trace_id: str, at_least: int, timeout_s: float = 15.0) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                found = [span for span in self.spans if span.trace_id.hex() == trace_id]
            if len(found) >= at_least:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{len(found)} spans of trace {trace_id} arrived, expected at least {at_least}")


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.server.spans.extend(scope.spans)
        reply = trace_service.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the spans, not the receiver's request lines."""


@contextmanager
def receiving(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A receiver running, and the OTEL_* settings of a service created now pointing at it."""
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "bertserve-test")
    try:
        yield server
    finally:
        server.shutdown()


def attributes(span: Any) -> dict[str, Any]:
    values = {}
    for item in span.attributes:
        kind = item.value.WhichOneof("value")
        values[item.key] = getattr(item.value, kind)
    return values
