"""Queue of model rows from many requests, cut into padded-token-budgeted batches; admission by cost.

The event loop submits a request's rows and awaits one future; each of the model's worker threads calls
``next_batch`` (blocking) and then ``complete`` or ``fail``; new rows wake the idle worker with the lowest
number. Futures are resolved on their own loop with ``call_soon_threadsafe``, once per batch and loop.

Admission counts work, not requests: a request brings ``rows x tokens``, the queue holds the tokens queued ahead
of it, and the model's measured seconds per token (from batches it ran) turns both into time. A request that
would not finish within ``ADMIT_WITHIN`` of its deadline is refused before any model work: 429 with a
``Retry-After`` of the queue's excess, or 413 when it alone needs more than that. Rows of cancelled, timed-out or
failed requests, and rows whose deadline passed while queued, are dropped before they reach the model.

Background rows (a batch job's, ``spare=True``) wait in a queue of their own, outside admission and deadlines: a
worker takes them only when no online row is queued, so they run on what online traffic leaves.

The rows, batches and limits it works with are ``service.batch_rows``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from service.batch_rows import (
    BatchPolicy,
    PendingRequest,
    RowOutputs,
    WorkBatch,
    WorkItem,
    choose_rows,
    expire_request,
    reject_requests,
    resolve_requests,
)
from service.errors import NotReady, Overloaded, PayloadTooLarge, ServiceError
from service.model_rate import ModelRate
from service.statistics import ModelStatistics
from service.tasks.base import ModelRow
from service.tracing import RequestRecord, queue_spans

# Admit a request only when the work ahead of it and its own should end within this share of its deadline: the
# rest is headroom for the rate estimate's error and for the batches already running.
ADMIT_WITHIN = 0.4
SHED_REASONS = ("before_tokenizing", "queue_full", "over_budget", "too_big", "expired")
# Background rows have no deadline to keep: their batches are grouped from this many times more rows (fewer pads).
SPARE_LOOKAHEAD = 4
# Within this long of the last online rows, a background batch takes at most 1/this of the batch size: an online row
# arriving meanwhile waits for a short batch, not a full one.
ONLINE_RECENT_S = 0.25
SPARE_SHARE_BESIDE_ONLINE = 4
# With no online rows about, a background batch may be this many times the (latency-tuned) batch size and tokens.
SPARE_BATCH_SCALE = 4


def _worker_number(entry: tuple[int, threading.Condition]) -> int:
    return entry[0]


class Batcher:
    def __init__(
        self,
        policy: BatchPolicy,
        name: str = "model",
        workers: int = 1,
        parallel_runs: int | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        """``lock``: the lock of the other batchers whose workers this one shares (a LoRA base's and its adapters':
        ``service.runtime.Lanes``); a lock of its own when None."""
        self.policy = policy
        self.name = name
        self._queue: list[WorkItem] = []
        self._spare: list[WorkItem] = []  # background rows: batched only while _queue is empty
        self._online_at = -math.inf  # when online rows last came
        self.lock = self._lock = lock or threading.Lock()
        # Idle workers by number, each waiting on its own condition of the one lock: new rows wake the lowest
        # number, so a lone request always goes to worker 0.
        self._idle: list[tuple[int, threading.Condition]] = []
        self.workers = workers  # how many workers take batches
        # how many batches run at once (the workers' run gate): what the measured rate per batch is divided by
        self.parallel_runs = parallel_runs or workers
        self._closed = False
        self._suspended: NotReady | None = None  # set while the model has no live worker
        self._queued_tokens = 0  # tokens of the rows in _queue, live or not
        self.rate = ModelRate(min(256, policy.max_batch_tokens))  # one worker's seconds per token
        self._last_purge = 0.0
        self.dropped_rows = 0
        self.shed = dict.fromkeys(SHED_REASONS, 0)  # requests refused or dropped unanswered, by reason
        self.wasted_seconds = 0.0  # model time spent on rows nobody was waiting for any more
        self.statistics: ModelStatistics | None = None  # the engine's, once it is warm (service.statistics)

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def suspended(self) -> bool:
        return self._suspended is not None

    @property
    def seconds_per_token(self) -> float | None:
        """One worker's measured model time per real token (None until a large enough batch ran)."""
        return self.rate.seconds_per_token

    def submit(
        self,
        sequences: list[ModelRow],
        timeout_s: float | None = None,
        traced: bool = False,
        spare: bool = False,
        reserve_s: float = 0.0,
    ) -> PendingRequest:
        """Queue one request's rows (on the event loop). Refuses work that cannot end in time: PayloadTooLarge
        when the request alone cannot, Overloaded when the queue ahead of it is too long or too many rows.
        ``traced``: the request keeps the times of the batches that ran its rows. ``spare``: background rows, with
        no deadline, run when no online row waits. ``reserve_s``: of ``timeout_s``, what the request's work after
        the model (its decoding) is expected to take: the work queued and its own must end before it."""
        loop = asyncio.get_running_loop()
        now = time.perf_counter()
        if spare:
            timeout_s = None
        deadline = math.inf if timeout_s is None else now + timeout_s
        request = PendingRequest(loop, loop.create_future(), [None] * len(sequences), len(sequences), deadline)
        if traced:
            request.batches = []
        if not sequences:
            request.future.set_result([])
            return request
        if len(sequences) > self.policy.max_queue:
            self.shed["too_big"] += 1
            raise PayloadTooLarge(
                f"the request needs {len(sequences)} rows; model {self.name} queues at most {self.policy.max_queue}"
            )
        items = [WorkItem(request, i, seq, len(seq), now) for i, seq in enumerate(sequences)]
        tokens = request.tokens = sum(item.length for item in items)
        with self._lock:
            if self._closed:
                raise NotReady(f"model {self.name} is shutting down")
            if self._suspended is not None:
                raise NotReady(self._suspended.message)
            if spare:
                if len(self._spare) + len(items) > self.policy.max_queue:
                    raise Overloaded(f"model {self.name} has {len(self._spare)} background rows queued", 1)
                self._spare.extend(items)
                if self._idle:
                    self._wake_lowest_locked()
                return request
            self._online_at = now
            if len(self._queue) + len(items) > self.policy.max_queue:
                self._purge_locked(now, force=True)
                if len(self._queue) + len(items) > self.policy.max_queue:
                    self.shed["queue_full"] += 1
                    raise Overloaded(
                        f"model {self.name} has {len(self._queue)} rows queued (limit {self.policy.max_queue})",
                        retry_after_s=self._retry_after_locked(self._queued_tokens + tokens, 0.0),
                    )
            if timeout_s is not None:
                self._admit_locked(tokens, len(items), timeout_s, now, reserve_s)
            self._queue.extend(items)
            self._queued_tokens += tokens
            if self._idle:  # waking a busy worker costs a GIL hand-off per request
                self._wake_lowest_locked()
        if timeout_s is not None:
            request.timer = loop.call_later(timeout_s, expire_request, request, timeout_s)
        return request

    def seconds_ahead(self) -> float:
        """Model time of the rows queued now, spread over the parallel runs (0 until a rate is measured)."""
        return self._queued_tokens * (self.seconds_per_token or 0.0) / self.parallel_runs

    def estimate_seconds(self, tokens: int, rows: int, alone: bool = False) -> float | None:
        """Model time for ``rows`` rows of ``tokens`` tokens in all, spread over the parallel runs (None: not
        measured); ``alone``: at the best rate measured, as on cores nothing else is using."""
        rate = self.rate.alone() if alone else self.rate.seconds_per_token
        if rate is None:
            return None
        return tokens * rate / max(1, min(self.parallel_runs, rows))

    def _admit_locked(self, tokens: int, rows: int, timeout_s: float, now: float, reserve_s: float = 0.0) -> None:
        own = self.estimate_seconds(tokens, rows)
        if own is None:
            return
        budget = ADMIT_WITHIN * timeout_s
        alone = self.estimate_seconds(tokens, rows, alone=True)
        if alone is not None and alone > budget:  # 413 for the request, not for the load: at the model's best
            self.shed["too_big"] += 1
            raise PayloadTooLarge(
                f"the request's {tokens} tokens need about {alone:.1f} s of model {self.name}'s time, more than the "
                f"{budget:.3g} s it may take of its {timeout_s:.3g} s deadline: send fewer or shorter inputs"
            )
        model_budget = ADMIT_WITHIN * max(0.0, timeout_s - reserve_s)  # its decoding set aside
        if self._over_budget_locked(tokens, own, model_budget):
            self._purge_locked(now, force=False)
            if self._over_budget_locked(tokens, own, model_budget):
                self.shed["over_budget"] += 1
                ahead = self.seconds_ahead()
                raise Overloaded(
                    f"model {self.name} has about {ahead:.1f} s of work queued; this request would not end within "
                    f"its {timeout_s:.3g} s deadline",
                    retry_after_s=self._retry_after_locked(self._queued_tokens + tokens, model_budget),
                )

    def _over_budget_locked(self, tokens: int, own: float, budget: float) -> bool:
        return self.seconds_ahead() + own > budget

    async def run(
        self,
        sequences: list[ModelRow],
        timeout_s: float | None = None,
        record: RequestRecord | None = None,
        spare: bool = False,
        reserve_s: float = 0.0,
    ) -> list[RowOutputs]:
        """Submit rows and wait for their outputs; a cancelled caller's rows never reach the model. ``record``: the
        request's access line, given its rows, tokens, queue and model time; ``spare``: background rows;
        ``reserve_s``: as ``submit``'s."""
        spans = record.spans if record is not None else None
        submitted = time.perf_counter() if spans is not None else 0.0
        request = self.submit(sequences, timeout_s, traced=spans is not None, spare=spare, reserve_s=reserve_s)
        try:
            outputs = await request.future
            if self.statistics is not None:
                self.statistics.waited(request.queued_s, request.model_s)
            if record is not None:
                record.rows, record.tokens = len(sequences), request.tokens
                record.queue_ms, record.model_ms = 1000 * request.queued_s, 1000 * request.model_s
            if spans is not None:
                spans += queue_spans(submitted, request.queued_s, len(sequences), request.batches or [])
            return outputs
        except BaseException:
            request.cancelled = True
            if request.timer is not None:
                request.timer.cancel()
            raise

    @property
    def idle_workers(self) -> int:
        """Workers waiting for rows now (read without the lock: a hint)."""
        return len(self._idle)

    def next_batch(self, worker: int = 0) -> WorkBatch | None:
        """Block until a batch is due (worker thread). None once closed and drained."""
        with self._lock:
            while True:
                due = self.poll_locked()
                if due is None or isinstance(due, WorkBatch):
                    return due
                self._wait_locked(worker, None if due == math.inf else due)

    def poll_locked(self) -> WorkBatch | float | None:
        """The batch due now; else how long until one may be (inf: until rows come); None once closed and
        drained. Called with ``lock`` held."""
        while True:
            if not self._queue:
                if self._spare:
                    if (batch := self._take_batch_locked(spare=True)) is not None:
                        self._wake_if_rows_left_locked()
                        return batch
                    continue
                return None if self._closed else math.inf
            wait = self._queue[0].enqueued_at + self.policy.max_wait_s - time.perf_counter()
            if wait > 0 and not self._closed and not self._can_fill_locked():
                return wait
            batch = self._take_batch_locked()
            if batch is not None:
                self._wake_if_rows_left_locked()
                return batch

    def closed_locked(self) -> bool:
        return self._closed

    def drained_locked(self) -> bool:
        """Closed, and no row left to run."""
        return self._closed and not self._queue and not self._spare

    def share_idle_locked(self, other: Batcher) -> None:
        """Count idle workers in ``other``'s list (batchers whose rows the same workers take, under one lock): a
        worker parks once for all of them, and rows queued on any wake it."""
        self._idle = other._idle

    def park_locked(self, entry: tuple[int, threading.Condition]) -> None:
        """Count ``entry`` (a worker number and its condition of ``lock``) among the idle workers new rows wake."""
        self._idle.append(entry)

    def unpark_locked(self, entry: tuple[int, threading.Condition]) -> None:
        self._idle.remove(entry)

    def complete(self, batch: WorkBatch, rows: list[RowOutputs], elapsed_s: float) -> None:
        """Hand each row's outputs to its request; resolve requests whose rows are all done."""
        finished: dict[asyncio.AbstractEventLoop, list[PendingRequest]] = {}
        timed: set[int] = set()
        unwanted = 0
        for item, row in zip(batch.items, rows, strict=True):
            request = item.request
            if not request.live:
                unwanted += 1
                continue
            request.outputs[item.index] = row
            request.remaining -= 1
            request.queued_s = max(request.queued_s, batch.formed_at - item.enqueued_at)
            if id(request) not in timed:  # a batch's model time counts once per request it served
                timed.add(id(request))
                request.model_s += elapsed_s
                if request.batches is not None:
                    done = time.perf_counter()
                    request.batches.append((done - elapsed_s, done, len(batch.items), batch.padded_tokens))
            if request.remaining == 0:
                finished.setdefault(request.loop, []).append(request)
        for loop, requests in finished.items():
            self._call_on(loop, resolve_requests, requests)
        if unwanted:
            self.wasted_seconds += elapsed_s * unwanted / len(batch.items)
        self.rate.record(batch.real_tokens, elapsed_s)
        if self.statistics is not None:
            self.statistics.executed(len(batch.items), elapsed_s)

    def fail(self, batch: WorkBatch, error: ServiceError) -> None:
        """Fail every live request with a row in ``batch``; their other queued rows get dropped."""
        failed: dict[asyncio.AbstractEventLoop, list[PendingRequest]] = {}
        for item in batch.items:
            request = item.request
            if request.live:
                request.failed = True
                failed.setdefault(request.loop, []).append(request)
        for loop, requests in failed.items():
            self._call_on(loop, reject_requests, requests, error)

    def close(self, drain: bool = True, error: ServiceError | None = None) -> None:
        """Stop accepting rows. Without ``drain``, queued requests fail with ``error`` (default NotReady)."""
        with self._lock:
            self._closed = True
            if not drain and (self._queue or self._spare):
                self.fail(WorkBatch(self._queue + self._spare), error or NotReady(f"model {self.name} stopped"))
                self._queue, self._spare = [], []
                self._queued_tokens = 0
            for _, waiting in self._idle:
                waiting.notify()

    def suspend(self, error: NotReady) -> None:
        """The model has no live worker: fail what is queued with ``error`` and refuse new rows until ``resume``."""
        with self._lock:
            self._suspended = error
            if self._queue or self._spare:
                self.fail(WorkBatch(self._queue + self._spare), error)
                self._queue, self._spare = [], []
                self._queued_tokens = 0

    def resume(self) -> None:
        with self._lock:
            self._suspended = None

    @staticmethod
    def _call_on(loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody is waiting any more
            loop.call_soon_threadsafe(callback, *args)

    def _wake_if_rows_left_locked(self) -> None:
        if (self._queue or self._spare) and self._idle:  # rows left for another worker: wake one
            self._wake_lowest_locked()

    def _wake_lowest_locked(self) -> None:
        min(self._idle, key=_worker_number)[1].notify()

    def _wait_locked(self, worker: int, timeout: float | None) -> None:
        entry = (worker, threading.Condition(self._lock))
        self.park_locked(entry)
        try:
            entry[1].wait(timeout)
        finally:
            self.unpark_locked(entry)

    def _can_fill_locked(self) -> bool:
        if len(self._queue) >= self.policy.max_batch_size:
            return True
        return max(item.length for item in self._queue) * len(self._queue) >= self.policy.max_batch_tokens

    def _purge_locked(self, now: float, force: bool) -> None:
        """Drop queued rows of requests nobody waits for (at most every 50 ms unless ``force``)."""
        if not force and now - self._last_purge < 0.05:
            return
        self._last_purge = now
        live = [item for item in self._queue if item.request.live]
        spare = [item for item in self._spare if item.request.live]
        self.dropped_rows += len(self._queue) + len(self._spare) - len(live) - len(spare)
        self._queue, self._spare = live, spare
        self._queued_tokens = sum(item.length for item in live)

    def _retry_after_locked(self, tokens: int, budget: float) -> int:
        """Seconds until the queue has drained enough for ``tokens`` more to fit in ``budget`` (1 when unknown)."""
        rate = self.seconds_per_token
        if rate is None:
            return 1
        excess = tokens * rate / self.parallel_runs - budget
        return max(1, math.ceil(excess))

    def _take_batch_locked(self, spare: bool = False) -> WorkBatch | None:
        queue = self._spare if spare else self._queue
        now = time.perf_counter()
        candidates: list[WorkItem] = []
        position = 0
        taken_tokens = 0
        lookahead = SPARE_LOOKAHEAD * self.policy.lookahead if spare else self.policy.lookahead
        while position < len(queue) and len(candidates) < lookahead:
            item = queue[position]
            position += 1
            taken_tokens += item.length
            request = item.request
            if request.live and request.deadline <= now:
                request.cancelled = True
                self.shed["expired"] += 1
                self._call_on(request.loop, expire_request, request, None)
            if request.live:
                candidates.append(item)
            else:
                self.dropped_rows += 1
        if not candidates:
            self._requeue_locked(spare, queue[position:], taken_tokens)
            return None
        max_size, max_tokens = self.policy.max_batch_size, self.policy.max_batch_tokens
        if spare and now - self._online_at < ONLINE_RECENT_S:  # an online row may come while it runs: keep it short
            max_size = max(1, max_size // SPARE_SHARE_BESIDE_ONLINE)
        elif spare:  # nobody waits on this batch: fewer, larger model calls
            max_size, max_tokens = max_size * SPARE_BATCH_SCALE, max_tokens * SPARE_BATCH_SCALE
        chosen = choose_rows([item.length for item in candidates], max_tokens, max_size, self.policy.overhead_tokens)
        chosen_set = set(chosen)
        leftovers = [item for k, item in enumerate(candidates) if k not in chosen_set]
        self._requeue_locked(spare, leftovers + queue[position:], taken_tokens - sum(item.length for item in leftovers))
        return WorkBatch([candidates[k] for k in chosen], backlog=len(self._queue) + len(self._spare))

    def _requeue_locked(self, spare: bool, rows: list[WorkItem], taken_tokens: int) -> None:
        if spare:
            self._spare = rows
        else:
            self._queue = rows
            self._queued_tokens -= taken_tokens
