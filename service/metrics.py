"""Prometheus metrics, one CollectorRegistry per app (so tests and several apps never collide); and the access line.

The access line: one console line per request (``--access-log``, on by default), and the JSON log format
(``--log-format json``).

The line says what a request was and what it cost, never what it carried: method, path, status, the model that
answered, how many inputs, model rows and tokens it brought, how long its rows waited in the queue and ran in the
model, and its total time. The HTTP layer (``service.middleware.MetricsMiddleware``) opens a
``service.tracing.RequestRecord`` for each request in ``service.tracing.ACCESS_RECORD``, the engine and the batcher
fill it in as the request passes, and the layer writes the line when the answer has gone.

    POST /v1/text-classification 200 model=sst2 inputs=2 rows=2 tokens=14 queue_ms=0.3 model_ms=4.9 total_ms=7.2

A gRPC call's line has the method ``GRPC``, the call's path and its status code's name (``OK``, ...).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from service.settings import TUNED_SETTINGS

if TYPE_CHECKING:
    from service.engine import Engine
    from service.runtime import BatchStats
    from service.tracing import RequestRecord
    from service.tuning import BatchingChoice

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768)
RATIO_BUCKETS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
MODEL_LABELS = ("model", "task")  # every per-model series: the model's name and the task it serves


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "bertserve_requests", "HTTP requests by route template and status code", ["route", "status"], registry=reg
        )
        self.request_seconds = Histogram(
            "bertserve_request_duration_seconds",
            "HTTP request latency",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.in_flight = Gauge("bertserve_requests_in_flight", "HTTP requests being handled", registry=reg)

        def per_model_histogram(name: str, documentation: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, documentation, MODEL_LABELS, buckets=buckets, registry=reg)

        def per_model_counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, MODEL_LABELS, registry=reg)

        self.queue_seconds = per_model_histogram(
            "bertserve_queue_seconds", "Time a row waited before its batch formed", LATENCY_BUCKETS
        )
        self.batch_size = per_model_histogram("bertserve_batch_size", "Rows per batch", SIZE_BUCKETS)
        self.batch_tokens = per_model_histogram(
            "bertserve_batch_tokens", "Padded tokens per batch (rows x longest row)", TOKEN_BUCKETS
        )
        self.padding_waste = per_model_histogram(
            "bertserve_batch_padding_ratio", "Share of a batch's tokens that are padding", RATIO_BUCKETS
        )
        self.padding_tokens = per_model_counter("bertserve_padding_tokens", "Padding tokens run through the model")
        self.real_tokens = per_model_counter("bertserve_real_tokens", "Input tokens run through the model")
        self.inference_seconds = per_model_histogram(
            "bertserve_inference_seconds", "Time per batch: pad, run the session, split outputs", LATENCY_BUCKETS
        )
        self.failed_batches = per_model_counter("bertserve_failed_batches", "Batches whose inference failed")
        self.queue_depth = Gauge("bertserve_queue_depth", "Rows waiting per model", MODEL_LABELS, registry=reg)
        self.batching = Gauge(
            "bertserve_batching",
            "A model's batch limits and ORT threads; source: tuned at start-up or configured",
            (*MODEL_LABELS, "setting", "source"),
            registry=reg,
        )

        self.device = Gauge(
            "bertserve_model_device",
            "1 for the device each model runs on (cpu, cuda:N)",
            (*MODEL_LABELS, "device"),
            registry=reg,
        )
        self.engines = EngineCollector()
        reg.register(self.engines)
        self.ready = Gauge("bertserve_ready", "1 while /health/ready answers 200: every model warm, taking requests",
                           registry=reg)  # fmt: skip

    def watch_ready(self, ready: Callable[[], bool]) -> None:
        self.ready.set_function(lambda: float(ready()))

    def watch_engine(self, engine: Engine) -> None:
        """Export the engine's admission, waste and worker counters (read when /metrics is scraped)."""
        self.engines.engines[engine.name] = engine
        self.device.labels(engine.name, engine.task, engine.device.name).set(1)

    def observer(self, model: str, task: str) -> ModelMetrics:
        return ModelMetrics(self, model, task)

    def record_batching(self, model: str, task: str, batching: BatchingChoice) -> None:
        source = "tuned" if batching.tuned else "configured"
        for setting in TUNED_SETTINGS:
            self.batching.labels(model, task, setting, source).set(getattr(batching, setting))

    def watch_queue(self, model: str, task: str, depth: Callable[[], float]) -> None:
        self.queue_depth.labels(model, task).set_function(depth)

    def unwatch(self, engine: Engine) -> None:
        """An unloaded model: its own gauges and counters go (the request and batch totals it ran stay)."""
        model, task = engine.name, engine.task
        self.engines.engines.pop(model, None)
        labelled = [(self.queue_depth, (model, task)), (self.device, (model, task, engine.device.name))]
        labelled += [(self.batching, (model, task, setting, source)) for setting in TUNED_SETTINGS
                     for source in ("tuned", "configured")]  # fmt: skip
        for gauge, labels in labelled:
            with contextlib.suppress(KeyError):  # never set
                gauge.remove(*labels)


class ModelMetrics:
    """The batch observer of one model (called from its worker thread; prometheus_client is thread-safe).

    Its labelled series are made at its first batch: each histogram child holds a locked value per bucket (18 KB
    a model), which a hundred idle LoRA adapters would pay for before any traffic."""

    def __init__(self, metrics: ServiceMetrics, model: str, task: str) -> None:
        self.metrics, self.labels = metrics, (model, task)
        self._series: _ModelSeries | None = None

    def on_batch(self, stats: BatchStats) -> None:
        series = self._series or self._first_batch()
        for seconds in stats.queue_seconds:
            series.queue_seconds.observe(seconds)
        series.batch_size.observe(stats.rows)
        series.batch_tokens.observe(stats.padded_tokens)
        padding = stats.padded_tokens - stats.real_tokens
        series.padding_waste.observe(padding / stats.padded_tokens if stats.padded_tokens else 0.0)
        series.padding_tokens.inc(padding)
        series.real_tokens.inc(stats.real_tokens)
        series.inference_seconds.observe(stats.inference_seconds)
        if stats.failed:
            series.failed_batches.inc()

    def _first_batch(self) -> _ModelSeries:
        self._series = _ModelSeries(**{name: getattr(self.metrics, name).labels(*self.labels) for name in SERIES})
        return self._series


@dataclass(frozen=True, slots=True)
class _ModelSeries:
    queue_seconds: Histogram
    batch_size: Histogram
    batch_tokens: Histogram
    padding_waste: Histogram
    padding_tokens: Counter
    real_tokens: Counter
    inference_seconds: Histogram
    failed_batches: Counter


SERIES = tuple(field.name for field in fields(_ModelSeries))


class EngineCollector:
    """Counters the engines keep themselves: requests shed before running, model time nobody waited for,
    dropped rows, worker replacements and live workers, and the measured seconds per token admission uses."""

    def __init__(self) -> None:
        self.engines: dict[str, Engine] = {}

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        shed = CounterMetricFamily(
            "bertserve_shed_requests",
            "Requests refused or dropped before their rows ran, by reason (before_tokenizing: a long request the "
            "tokenizing stage refused; queue_full: row cap; over_budget: the "
            "queued work would not end in time; too_big: the request alone would not; expired: deadline passed "
            "while queued)",
            labels=[*MODEL_LABELS, "reason"],
        )
        wasted = CounterMetricFamily(
            "bertserve_wasted_model_seconds",
            "Model time spent on rows whose request had already ended",
            labels=MODEL_LABELS,
        )
        dropped = CounterMetricFamily(
            "bertserve_dropped_rows", "Queued rows of ended requests dropped before they ran", labels=MODEL_LABELS
        )
        restarts = CounterMetricFamily(
            "bertserve_worker_restarts", "Dead workers replaced with a fresh session", labels=MODEL_LABELS
        )
        alive = GaugeMetricFamily("bertserve_workers_alive", "Live worker threads per model", labels=MODEL_LABELS)
        rate = GaugeMetricFamily(
            "bertserve_seconds_per_token",
            "One worker's measured model time per real token (what admission by cost estimates with)",
            labels=MODEL_LABELS,
        )
        for name, engine in self.engines.items():
            labels = [name, engine.task]
            batcher = engine.batcher
            for reason, count in batcher.shed.items():
                shed.add_metric([*labels, reason], count)
            wasted.add_metric(labels, batcher.wasted_seconds)
            dropped.add_metric(labels, batcher.dropped_rows)
            restarts.add_metric(labels, engine.pool.restarts)
            alive.add_metric(labels, engine.pool.live)
            if batcher.seconds_per_token is not None:
                rate.add_metric(labels, batcher.seconds_per_token)
        yield from (shed, wasted, dropped, restarts, alive, rate)


class _Families:
    """Metric families already collected, in the shape ``generate_latest`` reads."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def labelled_by_process(expositions: Mapping[int, bytes], processes: int) -> bytes:
    """Several serving processes' expositions (process index -> its text) as one, every sample labelled with its
    ``process``: a scrape of any one process sees them all, and ``sum without (process)`` gives the service's. A
    process that did not answer (being replaced) is missing: ``bertserve_processes`` says how many did."""
    counted = GaugeMetricFamily("bertserve_processes", "Serving processes: configured, and those in this scrape",
                                labels=["state"])  # fmt: skip
    counted.add_metric(["configured"], processes)
    counted.add_metric(["scraped"], len(expositions))
    families: dict[str, Metric] = {counted.name: counted}
    for index, text in sorted(expositions.items()):
        for family in text_string_to_metric_families(text.decode()):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            merged.samples.extend(
                sample._replace(labels={**sample.labels, "process": str(index)}) for sample in family.samples
            )
    return generate_latest(_Families(list(families.values())))


ACCESS_LOGGER = logging.getLogger("bertserve.access")


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
    """One JSON object per record: time, level, logger, message, and an access line's fields at the top level; with
    several serving processes, the writer's ``process`` index."""

    def __init__(self, process: int | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self.process is not None:
            entry["process"] = self.process
        entry.update(getattr(record, "access", {}))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
