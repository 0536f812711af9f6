"""Each model's inference statistics, as Triton's statistics extension reports them (``GET /v2/models/NAME/stats``,
gRPC ``ModelStatistics``; ``tritonclient``'s ``get_inference_statistics``): cumulative since the model was warmed up
(the warm-up is no traffic), durations in nanoseconds.

- ``inference_count``: inputs of the requests that succeeded (Triton counts each item of a batched request);
  ``execution_count``: batches run, however many requests they served.
- ``success`` / ``fail``: requests and their time in the engine (tokenizing, queue, model, post-processing);
  a failure is any error once the model has the request (a 4xx of its inputs, a 429 of admission, a timeout).
- ``queue``: per request, the longest wait of its rows between being queued and their batch being cut;
  ``compute_infer``: per request, the time of the batches that ran its rows. Padding and splitting a batch are
  inside that time, so ``compute_input`` and ``compute_output`` have its counts and 0 ns (perf_analyzer wants the
  three counts equal); the cache's stay zero (no cache).
- ``batch_stats``: per batch size (rows), the batches of that size and their time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

NS = 1_000_000_000


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * NS)

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


ZERO = Duration().to_json()


def counted_only(duration: Duration) -> dict[str, int]:
    """A stage timed inside another: the other's count, no time of its own."""
    return {"count": duration.count, "ns": 0}


class ModelStatistics:
    """Counters the engine (requests, on the event loop) and its workers (batches, on their threads) add to."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.success, self.fail, self.queue, self.compute_infer = Duration(), Duration(), Duration(), Duration()
        self.batches: dict[int, Duration] = {}

    def succeeded(self, inputs: int, seconds: float) -> None:
        with self._lock:
            self.inference_count += inputs
            self.success.add(seconds)
            self.last_inference_ms = int(time.time() * 1000)

    def failed(self, seconds: float) -> None:
        with self._lock:
            self.fail.add(seconds)
            self.last_inference_ms = int(time.time() * 1000)

    def waited(self, queued_s: float, model_s: float) -> None:
        """One request's rows are all done: the longest wait among them, and the time of the batches that ran them."""
        with self._lock:
            self.queue.add(queued_s)
            self.compute_infer.add(model_s)

    def executed(self, rows: int, seconds: float) -> None:
        """A batch of ``rows`` ran in ``seconds``."""
        with self._lock:
            self.execution_count += 1
            size = self.batches.get(rows)
            if size is None:
                size = self.batches[rows] = Duration()
            size.add(seconds)

    def to_json(self, name: str, version: str) -> dict[str, Any]:
        """Triton's ``model_stat`` object."""
        with self._lock:
            return {
                "name": name,
                "version": version,
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {
                    "success": self.success.to_json(),
                    "fail": self.fail.to_json(),
                    "queue": self.queue.to_json(),
                    "compute_input": counted_only(self.compute_infer),
                    "compute_infer": self.compute_infer.to_json(),
                    "compute_output": counted_only(self.compute_infer),
                    "cache_hit": ZERO,
                    "cache_miss": ZERO,
                },
                "batch_stats": [
                    {
                        "batch_size": rows,
                        "compute_input": counted_only(self.batches[rows]),
                        "compute_infer": self.batches[rows].to_json(),
                        "compute_output": counted_only(self.batches[rows]),
                    }
                    for rows in sorted(self.batches)
                ],
            }
