"""A request's rows in flight, the queued rows, and the batches cut from them (the batch stage of the path).

``choose_rows`` picks which queued rows form one batch: a run of neighbouring lengths that fits the padded-token
budget and does not lose efficiency to padding. ``service.batcher`` queues, admits and hands these batches out.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

import numpy as np

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
    items: list[WorkItem]  # sorted by length, shortest first
    formed_at: float = field(default_factory=time.perf_counter)

    @property
    def longest(self) -> int:
        return self.items[-1].length

    @property
    def padded_tokens(self) -> int:
        return len(self.items) * self.longest

    @property
    def real_tokens(self) -> int:
        return sum(item.length for item in self.items)

    @property
    def sequences(self) -> list[ModelRow]:
        return [item.sequence for item in self.items]


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
