"""The worker threads of a model, each owning its ONNX Runtime session (worker 0 may own a second one, with more
threads, for batches that run while every other worker is idle).

It takes batches from the batcher, pads them, runs the session once per batch, cuts the outputs
back into per-row arrays and hands them to the batcher. A failing batch fails only its own
requests; the worker logs and keeps serving. If the thread itself dies, ``alive`` turns False.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from contract.onnx_io import PaddedRows, ort_session, pad_token_rows
from service.batcher import Batcher, RowOutputs, WorkBatch
from service.errors import InferenceError, NotReady

logger = logging.getLogger(__name__)

def split_rows(outputs: dict[str, np.ndarray], lengths: list[int], token_level: frozenset[str]) -> list[RowOutputs]:
    """Per-row views: token-level outputs (B, T, ...) cut to (len, ...), the others (B, ...) -> (...)."""
    rows: list[RowOutputs] = []
    for row, length in enumerate(lengths):
        rows.append(
            {name: (array[row, :length] if name in token_level else array[row]) for name, array in outputs.items()}
        )
    return rows


class ModelRunner(Protocol):
    output_names: tuple[str, ...]

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]: ...


class OrtRunner:
    """One onnxruntime InferenceSession, configured for CPU serving."""

    def __init__(
        self, model_path: Path, output_names: tuple[str, ...], intra_op_threads: int, spin: bool = False
    ) -> None:
        self.session = ort_session(model_path, threads=intra_op_threads, spin=spin)
        found = {out.name for out in self.session.get_outputs()}
        missing = [name for name in output_names if name not in found]
        if missing:
            raise ValueError(f"model.onnx lacks outputs {missing} (has {sorted(found)})")
        self.output_names = output_names
        self.output_shapes = {node.name: list(node.shape) for node in self.session.get_outputs()}
        self._input_names = [inp.name for inp in self.session.get_inputs()]

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        feeds = batch.feeds
        arrays = self.session.run(list(self.output_names), {name: feeds[name] for name in self._input_names})
        return dict(zip(self.output_names, arrays, strict=True))


@dataclass(frozen=True, slots=True)
class BatchStats:
    rows: int
    padded_tokens: int
    real_tokens: int
    queue_seconds: list[float]
    inference_seconds: float
    failed: bool


class BatchObserver(Protocol):
    def on_batch(self, stats: BatchStats) -> None: ...


class Worker:
    """The thread that serves one batcher with one runner."""

    def __init__(
        self,
        name: str,
        batcher: Batcher,
        runner: ModelRunner,
        pad_token_id: int,
        token_level: frozenset[str],
        observer: BatchObserver | None = None,
        number: int = 0,  # among the model's workers
        solo_runner: ModelRunner | None = None,
    ) -> None:
        """``solo_runner`` (a session with more threads) runs the batches taken while every other worker is idle."""
        self.name = name
        self.number = number
        self.solo_runner = solo_runner
        self.batcher = batcher
        self.runner = runner
        self.pad_token_id = pad_token_id
        self.token_level = token_level
        self.observer = observer
        self.died: BaseException | None = None
        self.batches_served = 0
        self.batches_failed = 0
        self._thread = threading.Thread(target=self._serve, name=f"bertserve-worker-{name}-{number}", daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.died is None

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _serve(self) -> None:
        batch: WorkBatch | None = None
        try:
            while (batch := self.batcher.next_batch(self.number)) is not None:
                self._run_batch(batch)
        except BaseException as exc:
            self.died = exc
            logger.critical("worker for model %s died: %r; the model is no longer served", self.name, exc)
            error = NotReady(f"model {self.name} is not being served (its worker died)")
            self.batcher.close(drain=False, error=error)  # first: nobody may queue behind a dead worker
            if batch is not None:
                self.batcher.fail(batch, error)

    def _run_batch(self, batch: WorkBatch) -> None:
        started = time.perf_counter()
        queue_seconds = [batch.formed_at - item.enqueued_at for item in batch.items]
        failed = False
        try:
            padded = pad_token_rows(batch.sequences, self.pad_token_id)
            runner = self.runner
            if self.solo_runner is not None and self.batcher.idle_workers >= self.batcher.workers - 1:
                runner = self.solo_runner
            outputs = runner.run(padded)
            rows = split_rows(outputs, padded.lengths, self.token_level)
        except Exception as exc:
            failed = True
            self.batches_failed += 1
            logger.exception("batch of %d rows failed on model %s", len(batch.items), self.name)
            self.batcher.fail(batch, InferenceError(f"inference failed on model {self.name}: {exc}"))
        else:
            self.batches_served += 1
            self.batcher.complete(batch, rows, time.perf_counter() - started)
        elapsed = time.perf_counter() - started
        if self.observer is not None:
            try:
                self.observer.on_batch(
                    BatchStats(len(batch.items), batch.padded_tokens, batch.real_tokens, queue_seconds, elapsed, failed)
                )
            except Exception:
                logger.exception("batch observer failed for model %s", self.name)
