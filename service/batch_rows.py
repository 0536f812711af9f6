"""A request's rows in flight (``PendingRequest``), the queued rows (``WorkItem``), the batches cut from them
(``WorkBatch``), the batcher's limits (``BatchPolicy``, ``batch_policy``) and ``choose_rows``, which picks the queued
rows that form one batch: a run of neighbouring lengths that fits the padded-token budget and does not lose
efficiency to padding."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import numpy as np

from service.errors import RequestTimeout
from service.settings import Settings
from service.tasks.base import ModelRow

RowOutputs = dict[str, np.ndarray]


@dataclass(slots=True, eq=False)
class PendingRequest:
    """One request's rows in flight. ``cancelled`` is set on the loop; the rest only by the worker."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[RowOutputs]]
    outputs: list[RowOutputs | None]
    remaining: int
    deadline: float = math.inf  # time.perf_counter() by which the answer is due
    cancelled: bool = False
    failed: bool = False
    timer: asyncio.TimerHandle | None = None
    tokens: int = 0  # of its rows, together
    queued_s: float = 0.0  # its rows' longest wait, from queued to their batch being cut
    model_s: float = 0.0  # the model time of the batches that ran its rows
    batches: list[tuple[float, float, int, int]] | None = None  # traced: each batch's (start, end, rows, padded)

    @property
    def live(self) -> bool:
        return not (self.cancelled or self.failed)


@dataclass(slots=True, eq=False)
class WorkItem:
    request: PendingRequest
    index: int  # position among the request's rows
    sequence: ModelRow
    length: int
    enqueued_at: float


@dataclass(slots=True)
class WorkBatch:
    """Rows cut for one model call; its sizes are worked out once, when it is cut."""

    items: list[WorkItem]  # sorted by length, shortest first
    formed_at: float = field(default_factory=time.perf_counter)
    backlog: int = 0  # rows left queued when it was cut
    longest: int = field(init=False)
    padded_tokens: int = field(init=False)
    real_tokens: int = field(init=False)
    sequences: list[ModelRow] = field(init=False)

    def __post_init__(self) -> None:
        self.longest = self.items[-1].length if self.items else 0
        self.padded_tokens = len(self.items) * self.longest
        self.real_tokens = sum(item.length for item in self.items)
        self.sequences = [item.sequence for item in self.items]


def choose_rows(lengths: list[int], max_tokens: int, max_size: int, overhead_tokens: float = math.inf) -> list[int]:
    """Indices of rows for one batch, shortest first; always includes row 0 (the oldest).

    Starting from the oldest row, grow a run of neighbours in length order, each time taking the
    neighbour that adds the least padding, while ``rows x longest <= max_tokens`` and while the
    batch's efficiency ``real tokens / (padded tokens + overhead_tokens)`` does not drop:
    ``overhead_tokens`` is the fixed cost of one model call in token equivalents, so rows of very
    different lengths go in separate batches unless the call overhead outweighs their padding.
    A row longer than the whole budget goes alone.
    """
    order = sorted(range(len(lengths)), key=lambda k: (lengths[k], k))
    lo = hi = order.index(0)
    longest = real = lengths[0]
    count = 1
    while count < max_size:
        left = order[lo - 1] if lo > 0 else None
        right = order[hi + 1] if hi + 1 < len(order) else None
        left_waste = longest - lengths[left] if left is not None and (count + 1) * longest <= max_tokens else None
        right_waste = (
            count * (lengths[right] - longest)
            if right is not None and (count + 1) * lengths[right] <= max_tokens
            else None
        )
        if left_waste is None and right_waste is None:
            break
        take_left = right_waste is None or (left_waste is not None and left_waste <= right_waste)
        added = lengths[left] if take_left else lengths[right]  # type: ignore[index]
        new_longest = longest if take_left else added
        if real / (count * longest + overhead_tokens) > (real + added) / ((count + 1) * new_longest + overhead_tokens):
            break
        if take_left:
            lo -= 1
        else:
            hi += 1
        longest, real, count = new_longest, real + added, count + 1
    return order[lo : hi + 1]


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """The batcher's limits. No defaults of its own: ``from_settings`` takes them from ``Settings``."""

    max_batch_tokens: int  # padded: rows x longest row
    max_batch_size: int
    max_wait_s: float
    max_queue: int  # rows
    lookahead: int  # queued rows considered when grouping similar lengths
    overhead_tokens: float  # cost of one model call in tokens (see choose_rows); inf: fill batches

    @classmethod
    def from_settings(cls, settings: Settings, max_batch_tokens: int | None = None) -> BatchPolicy:
        """The policy ``settings`` ask for; ``max_batch_tokens`` replaces theirs (an engine may need fewer)."""
        return cls(
            max_batch_tokens=settings.max_batch_tokens if max_batch_tokens is None else max_batch_tokens,
            max_batch_size=settings.max_batch_size,
            max_wait_s=settings.max_wait_ms / 1000.0,
            max_queue=settings.max_queue,
            lookahead=max(4 * settings.max_batch_size, 64),
            overhead_tokens=settings.batch_overhead_tokens,
        )


def resolve_requests(requests: list[PendingRequest]) -> None:
    """Each request's outputs to its future (on the request's loop)."""
    for request in requests:
        if request.timer is not None:
            request.timer.cancel()
        if not request.future.done():
            request.future.set_result(request.outputs)  # type: ignore[arg-type]


def reject_requests(requests: list[PendingRequest], error: BaseException) -> None:
    """``error`` to each request's future (on the request's loop)."""
    for request in requests:
        if request.timer is not None:
            request.timer.cancel()
        if not request.future.done():
            request.future.set_exception(error)


def expire_request(request: PendingRequest, timeout_s: float | None) -> None:
    """The request's deadline passed (its loop's timer): its rows are dropped, its future fails with a timeout."""
    request.cancelled = True
    if request.timer is not None:
        request.timer.cancel()
    if not request.future.done():
        waited = "its deadline" if timeout_s is None else f"{timeout_s:g} s"
        request.future.set_exception(RequestTimeout(f"request timed out after {waited}"))


# fill-mask's logits are (B, T, vocab) float32: 4096 tokens x 30522 words would be 500 MB per batch.
MAX_TOKEN_OUTPUT_BYTES = 256 << 20


def batch_policy(settings: Settings, floats_per_token: int = 0) -> BatchPolicy:
    """The batcher's limits; ``floats_per_token`` (the widest token-level output) caps the token budget."""
    max_tokens = settings.max_batch_tokens
    if floats_per_token > 0:
        max_tokens = max(1, min(max_tokens, MAX_TOKEN_OUTPUT_BYTES // (4 * floats_per_token)))
    return BatchPolicy.from_settings(settings, max_batch_tokens=max_tokens)
