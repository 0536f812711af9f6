"""The worker threads that share a model's session (``service.sessions``).

A worker takes batches from the batcher, pads them, runs the session once per batch, cuts the outputs back into
per-row arrays and hands them to the batcher. The workers of a model share one run gate: at most its width of them
take and run a batch at once (one, on a session with every core's threads: the next batch forms while the last one's
outputs are cut and answered; more, where concurrent runs measured faster, or every worker on a small model's split
runner, which gives each batch every thread or one: ``service.sessions.SplitRunner``).

A failing batch fails only its own requests (500) and the worker goes on; after ``RETIRE_AFTER_FAILURES`` failed
batches in a row, or if the thread itself dies, the worker fails its batch with a 503 naming the model, turns
``alive`` False and calls ``on_death`` (the engine replaces it with a fresh session: service/supervision.py).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from contract.onnx_io import PaddedRows, pad_token_rows
from service.batch_rows import RowOutputs, WorkBatch
from service.batcher import Batcher
from service.errors import InferenceError, NotReady
from service.sessions import ModelRunner, SplitRunner

logger = logging.getLogger(__name__)

RETIRE_AFTER_FAILURES = 3


def split_rows(outputs: dict[str, np.ndarray], lengths: list[int], token_level: frozenset[str]) -> list[RowOutputs]:
    """Per-row views: token-level outputs (B, T, ...) cut to (len, ...), the others (B, ...) -> (...)."""
    rows: list[RowOutputs] = []
    for row, length in enumerate(lengths):
        rows.append(
            {name: (array[row, :length] if name in token_level else array[row]) for name, array in outputs.items()}
        )
    return rows


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


@dataclass(eq=False)
class Lane:
    """One model's queue on a pool's workers: its batcher, the runner its batches run on, who watches its batches.
    ``rebind`` turns a fresh base session into this lane's runner (a LoRA adapter's: ``with_adapter``)."""

    name: str
    batcher: Batcher
    runner: ModelRunner
    observer: BatchObserver | None = None
    rebind: Callable[[ModelRunner], ModelRunner] | None = None


class Lanes:
    """The queues one pool of workers serves: a model's own, then its LoRA adapters' (a batcher each, so a batch
    never mixes adapters; one lock for all). A worker takes the next due batch lane by lane in turn and waits on
    all of them at once; a lane closed and drained leaves, and the workers end when none is left."""

    def __init__(self, first: Lane) -> None:
        self.lock = first.batcher.lock
        self.first = first  # the pool's own model
        self.lanes = [first]
        self._turn = 0

    def add(self, lane: Lane) -> None:
        """Serve ``lane`` too (its batcher made with ``lock``): its rows wake the workers parked on the others."""
        with self.lock:
            lane.batcher.share_idle_locked(self.first.batcher)
            self.lanes.append(lane)

    def batchers(self) -> list[Batcher]:
        return [lane.batcher for lane in self.lanes]

    def next_batch(self, worker: int) -> tuple[Lane, WorkBatch] | None:
        """Block until a lane has a batch due (worker thread); None once every lane is closed and drained."""
        with self.lock:
            while True:
                if not self.lanes:  # another worker found the last lane drained
                    return None
                wait, drained, count = math.inf, False, len(self.lanes)
                for step in range(count):
                    lane = self.lanes[(self._turn + step) % count]
                    due = lane.batcher.poll_locked()
                    if isinstance(due, WorkBatch):
                        self._turn = (self._turn + step + 1) % count
                        return lane, due
                    if due is None:
                        drained = True
                    else:
                        wait = min(wait, due)
                if drained:
                    self.lanes = [lane for lane in self.lanes if not lane.batcher.drained_locked()]
                    if not self.lanes:
                        return None
                entry = (worker, threading.Condition(self.lock))
                parked_on = self.lanes[0].batcher  # the lanes share one idle list (``add``)
                parked_on.park_locked(entry)
                try:
                    entry[1].wait(None if wait == math.inf else wait)
                finally:
                    parked_on.unpark_locked(entry)


class Worker:
    """The thread that serves a pool's lanes (a model's batcher, and its adapters') with their runners."""

    def __init__(
        self,
        name: str,
        lanes: Lanes,
        pad_token_id: int,
        token_level: frozenset[str],
        number: int = 0,  # among the model's workers
        gate: threading.Semaphore | None = None,
        on_death: Callable[[Worker], None] | None = None,
    ) -> None:
        """``gate``: the run gate the model's workers share (None: this worker never waits for another).
        ``on_death`` is called (on this thread) when the worker retires; without it a dead worker closes the
        lanes' batchers, failing what is queued."""
        self.name = name
        self.number = number
        self.gate: contextlib.AbstractContextManager[object] = gate if gate is not None else contextlib.nullcontext()
        self.lanes = lanes
        self.pad_token_id = pad_token_id
        self.token_level = token_level
        self.on_death = on_death
        self.died: BaseException | None = None
        self.failures_in_a_row = 0
        self._runner: ModelRunner | None = None
        self._thread = threading.Thread(target=self._serve, name=f"bertserve-worker-{name}-{number}", daemon=True)

    @property
    def runner(self) -> ModelRunner:
        """What this worker runs the pool's own model's batches on: the lane's runner unless set for this worker."""
        return self._runner if self._runner is not None else self.lanes.first.runner

    @runner.setter
    def runner(self, runner: ModelRunner | None) -> None:
        self._runner = runner

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.died is None

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _serve(self) -> None:
        taken: tuple[Lane, WorkBatch] | None = None
        try:
            while True:
                with self.gate:  # the batch is taken only once it can run: its rows' deadlines are checked then
                    if (taken := self.lanes.next_batch(self.number)) is None:
                        return
                    started = time.perf_counter()
                    ran = self._run(*taken)
                self._finish(*taken, ran, started)
                taken = None
                if self.failures_in_a_row >= RETIRE_AFTER_FAILURES:
                    raise SessionFailed(f"{self.failures_in_a_row} batches failed in a row")
        except BaseException as exc:
            self._retire(exc, taken)

    def _retire(self, exc: BaseException, taken: tuple[Lane, WorkBatch] | None) -> None:
        self.died = exc
        error = NotReady(f"model {self.name} lost a worker ({exc!r}); it is being replaced, retry shortly")
        if self.on_death is None:
            logger.critical("a worker of model %s died: %r; the model is no longer served", self.name, exc)
            for batcher in self.lanes.batchers():  # first: nobody may queue behind a dead worker
                batcher.close(drain=False, error=error)
        else:
            logger.error("worker %d of model %s died: %r; replacing it", self.number, self.name, exc)
        if taken is not None:
            taken[0].batcher.fail(taken[1], error)
        if self.on_death is not None:
            self.on_death(self)

    def _run(self, lane: Lane, batch: WorkBatch) -> tuple[PaddedRows, dict[str, np.ndarray]] | Exception:
        """Pad and run (inside the gate); an exception is returned for ``_finish`` to fail the batch with."""
        try:
            padded = pad_token_rows(batch.sequences, self.pad_token_id)
            runner = self.runner if lane is self.lanes.first else lane.runner
            if isinstance(runner, SplitRunner):  # every core for a batch alone, one thread beside others
                return padded, runner.run(padded, batch.backlog)
            return padded, runner.run(padded)
        except Exception as exc:
            return exc

    def _finish(
        self, lane: Lane, batch: WorkBatch, ran: tuple[PaddedRows, dict[str, np.ndarray]] | Exception, started: float
    ) -> None:
        queue_seconds = [batch.formed_at - item.enqueued_at for item in batch.items]
        observer, failed = lane.observer, False  # read before the batch's waiters wake (warm-up sets it aside)
        try:
            if isinstance(ran, Exception):
                raise ran
            padded, outputs = ran
            rows = split_rows(outputs, padded.lengths, self.token_level)
        except Exception as exc:
            failed = True
            self.failures_in_a_row += 1
            logger.exception("batch of %d rows failed on model %s", len(batch.items), lane.name)
            lane.batcher.fail(batch, InferenceError(f"inference failed on model {lane.name}: {exc}"))
        else:
            self.failures_in_a_row = 0
            lane.batcher.complete(batch, rows, time.perf_counter() - started)
        elapsed = time.perf_counter() - started
        if observer is not None:
            try:
                observer.on_batch(
                    BatchStats(len(batch.items), batch.padded_tokens, batch.real_tokens, queue_seconds, elapsed, failed)
                )
            except Exception:
                logger.exception("batch observer failed for model %s", lane.name)


class SessionFailed(Exception):
    """A worker's session kept failing batches: the worker retires and a fresh session replaces it."""
