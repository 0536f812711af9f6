"""OpenTelemetry traces (``pip install 'bertserve[tracing]'``), configured by the standard ``OTEL_*`` variables.

Tracing is on when the SDK is installed and an exporter is asked for: ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, or ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console`` (and
``OTEL_SDK_DISABLED`` is not ``true``). Otherwise ``configure`` returns None and no request pays anything: the
transports only test ``tracing is not None``. The SDK reads the rest itself: the OTLP endpoint, headers and timeout,
``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (``parentbased_traceidratio`` at ``0.01`` samples 1 %),
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_BSP_*`` for the batching exporter.

Each request gets a server span, continuing the caller's W3C ``traceparent`` (HTTP header or gRPC metadata), and,
when it is sampled, a child span per stage it went through: ``read body``, ``admission`` (waiting for the prepare
threads' ledger), ``tokenize``, ``queue wait``, ``batch run`` (one per batch that ran its rows: the batch's rows,
padded tokens and model seconds) and ``post-process``. The stages write their times into the request's record
(``RequestRecord.spans``) as they pass; the children are made from them when the request ends,
so nothing on the request path calls OpenTelemetry. The access line carries the trace id. The record lives in
``ACCESS_RECORD`` while the request runs (a context variable: the request's own task sees it).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.trace_settings import TraceSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

logger = logging.getLogger(__name__)
EXPORTERS = ("otlp", "console")
INSTALL = "pip install 'bertserve[tracing]'"


@dataclass(slots=True)
class RequestRecord:
    """What a request's access line (``service.metrics.log_access``) and its trace say beyond its HTTP facts (None
    or 0: it did not get that far)."""

    model: str | None = None
    inputs: int = 0
    rows: int = 0
    tokens: int = 0
    queue_ms: float | None = None  # its rows' longest wait between queued and their batch being cut
    model_ms: float | None = None  # the model time of the batches that ran its rows
    # When the request is traced: its trace id, and each stage it went through as
    # (name, start, end in perf_counter seconds, attributes), made into child spans when it ends.
    trace_id: str | None = None
    spans: list[tuple[str, float, float, dict[str, Any]]] | None = None


ACCESS_RECORD: ContextVar[RequestRecord | None] = ContextVar("bertserve_access_record", default=None)


def wanted() -> bool:
    """Whether the environment asks for traces (whatever is installed)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(endpoint) or exporter in EXPORTERS


Stage = tuple[str, float, float, dict[str, Any]]  # (name, start, end in perf_counter seconds, attributes)


def queue_spans(
    submitted: float, queued_s: float, rows: int, batches: list[tuple[float, float, int, int]]
) -> list[Stage]:
    """A traced request's ``queue wait`` and one ``batch run`` per batch (start, end, rows, padded tokens) that ran
    its rows."""
    stages: list[Stage] = [("queue wait", submitted, submitted + queued_s, {"bertserve.rows": rows})]
    for start, end, batch_rows, padded in batches:
        attributes = {"bertserve.batch.rows": batch_rows, "bertserve.batch.padded_tokens": padded,
                      "bertserve.batch.model_seconds": end - start}  # fmt: skip
        stages.append(("batch run", start, end, attributes))
    return stages


class Tracing:
    """The service's tracer: a server span per request, its stages' children made when it ends."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import propagate, trace

        self.provider = provider
        self.settings = TraceSettings(enabled=True)  # which requests get traced (Triton's trace extension)
        self.tracer: Tracer = provider.get_tracer("bertserve")
        self._propagator = propagate.get_global_textmap()
        self._trace = trace
        # perf_counter seconds (what the stages measure with) -> nanoseconds since the epoch (what spans carry)
        self._epoch_offset_ns = time.time_ns() - time.perf_counter_ns()

    def epoch_ns(self, perf_seconds: float) -> int:
        return int(perf_seconds * 1e9) + self._epoch_offset_ns

    def begin(
        self, name: str, carrier: Mapping[str, str], attributes: Mapping[str, Any], model: str | None = None
    ) -> Span:
        """The request's server span, a child of the caller's ``traceparent`` when ``carrier`` has one; a span that
        records nothing when the trace settings pass the request by (``model``: the model it names at its start)."""
        scope = self.settings.admit(model)
        if scope is None:
            return self._trace.INVALID_SPAN
        parent = self._propagator.extract(carrier)
        span = self.tracer.start_span(
            name, context=parent, kind=self._trace.SpanKind.SERVER, attributes=dict(attributes)
        )
        if span.is_recording():
            self.settings.taken(scope)
        return span

    def record_for(self, span: Span, access_log: bool) -> RequestRecord | None:
        """The request's record: one that collects stage times when ``span`` is sampled (and carries its trace id),
        a plain one for the access line, or None when neither wants one."""
        if span.is_recording():
            context = span.get_span_context()
            return RequestRecord(spans=[], trace_id=f"{context.trace_id:032x}")
        return RequestRecord() if access_log else None

    def end(self, span: Span, record: RequestRecord | None, attributes: Mapping[str, Any], error: bool) -> None:
        """The stages' spans (children of ``span``, at the times they ran), then ``span`` itself."""
        if not span.is_recording():  # not sampled: nothing to say
            span.end()
            return
        if record is not None and record.spans:
            context = self._trace.set_span_in_context(span)
            for name, start, end, stage_attributes in record.spans:
                child = self.tracer.start_span(
                    name, context=context, start_time=self.epoch_ns(start), attributes=stage_attributes
                )
                child.end(end_time=self.epoch_ns(end))
        if record is not None and record.model is not None:
            span.set_attributes({"bertserve.model": record.model, "bertserve.inputs": record.inputs,
                                 "bertserve.rows": record.rows, "bertserve.tokens": record.tokens})  # fmt: skip
        span.set_attributes(dict(attributes))
        if error:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end()

    def shutdown(self) -> None:
        """Export what is buffered, then stop the exporter."""
        self.provider.shutdown()


def configure(service_name: str = "bertserve") -> Tracing | None:
    """A Tracing when the environment asks for traces and the SDK is installed; else None (a warning when asked for
    but not installed)."""
    if not wanted():
        return None
    try:
        from opentelemetry.sdk.resources import OTEL_SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        logger.warning(
            "OTEL_* asks for traces but opentelemetry-sdk is not installed: pip install 'bertserve[tracing]'"
        )
        return None
    exporter: SpanExporter
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        exporter = ConsoleSpanExporter()
    else:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            logger.warning(
                "OTEL_* asks for OTLP traces but the exporter is not installed: pip install 'bertserve[tracing]'"
            )
            return None
        exporter = OTLPSpanExporter()
    name = os.environ.get(OTEL_SERVICE_NAME) or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    logger.info("tracing: spans exported by %s", type(exporter).__name__)
    return Tracing(provider)
