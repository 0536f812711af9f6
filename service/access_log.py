"""One console line per request (``--access-log``, on by default), and the JSON log format (``--log-format json``).

The line says what a request was and what it cost, never what it carried: method, path, status, the model that
answered, how many inputs, model rows and tokens it brought, how long its rows waited in the queue and ran in the
model, and its total time. The HTTP layer (``service.middleware.MetricsMiddleware``) opens a ``RequestRecord`` for
each request in ``ACCESS_RECORD`` (a context variable: the request's own task sees it), the engine and the batcher
fill it in as the request passes, and the layer writes the line when the answer has gone.

    POST /v1/text-classification 200 model=sst2 inputs=2 rows=2 tokens=14 queue_ms=0.3 model_ms=4.9 total_ms=7.2

A gRPC call's line has the method ``GRPC``, the call's path and its status code's name (``OK``, ...).
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

ACCESS_LOGGER = logging.getLogger("bertserve.access")


@dataclass(slots=True)
class RequestRecord:
    """What a request's line says beyond its HTTP facts (None or 0: it did not get that far)."""

    model: str | None = None
    inputs: int = 0
    rows: int = 0
    tokens: int = 0
    queue_ms: float | None = None  # its rows' longest wait between queued and their batch being cut
    model_ms: float | None = None  # the model time of the batches that ran its rows
    # When the request is traced (service.tracing): its trace id, and each stage it went through as
    # (name, start, end in perf_counter seconds, attributes), made into child spans when it ends.
    trace_id: str | None = None
    spans: list[tuple[str, float, float, dict[str, Any]]] | None = None


ACCESS_RECORD: ContextVar[RequestRecord | None] = ContextVar("bertserve_access_record", default=None)


def access_fields(method: str, path: str, status: int | str, total_s: float, record: RequestRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {"method": method, "path": path, "status": status}
    if record.model is not None:
        fields.update(model=record.model, inputs=record.inputs, rows=record.rows, tokens=record.tokens)
    if record.queue_ms is not None:
        fields.update(queue_ms=round(record.queue_ms, 1), model_ms=round(record.model_ms or 0.0, 1))
    fields["total_ms"] = round(1000 * total_s, 1)
    if record.trace_id is not None:
        fields["trace_id"] = record.trace_id
    return fields


def log_access(method: str, path: str, status: int | str, total_s: float, record: RequestRecord) -> None:
    fields = access_fields(method, path, status, total_s, record)
    words = [f"{key}={value}" for key, value in fields.items() if key not in ("method", "path", "status")]
    ACCESS_LOGGER.info("%s %s %s %s", method, path, status, " ".join(words), extra={"access": fields})


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and an access line's fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(getattr(record, "access", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
