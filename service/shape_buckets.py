"""Batch shapes rounded up to a few buckets: for a device where a shape never run before costs more than a repeat.

Served batches come in ever new (rows, tokens) shapes: a batch holds whatever queued, padded to its longest row. On a
CPU that costs nothing (``benchmarks.gpu_shapes``'s smoke: no first-call cost), and padding further is only extra
work, so the CPU runs each batch as it is. On ONNX Runtime's CUDA provider a new shape is set up afresh (memory
planned and allocated, kernels chosen and loaded): an arena that allocated afresh per shape lost 10x at c=32 on an
H200, and the H200's served MiniLM batches of SST-2 sentences took 53-61 ms in the model whatever their rows where the
raw loop, repeating its sorted shapes, ran them in 1-4 ms (``benchmarks/results/gpu.md``). So on a GPU a batch is
padded up to the next bucket, rows and tokens each rounded up to the series 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers
of two and one and a half times them: at most 1.5x of either, tokens at least 16 and never past the model's longest
input), and start-up runs every bucket a batch within the model's limits can take, smallest first, for up to
``WARM_UP_SECONDS``: served traffic then meets no shape for the first time (like TF Serving's ``allowed_batch_sizes``
and vLLM's CUDA-graph sizes).

Padding keeps every real row's answer: new positions carry the pad token with attention 0, new rows repeat the last
real row (so no row is all padding), and only the real rows come back. A batch whose bucket would grow wide
per-token outputs (fill-mask's vocabulary) past the batcher's cap on them runs as it is (``max_padded_tokens``, set
where the model loads, from the same per-token width the batcher's cap comes from).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from contract.onnx_io import PaddedRows

MIN_TOKENS = 16
WARM_UP_SECONDS = 30.0


class Runs(Protocol):
    def run(self, batch: PaddedRows) -> Any: ...


def bucket_size(count: int, floor: int = 1) -> int:
    """The smallest of 1, 2, 3, 4, 6, 8, 12, 16, ... (2^k and 3 x 2^(k-1)) that is >= ``count`` and >= ``floor``."""
    count = max(count, floor, 1)
    power = 1 << (count - 1).bit_length()  # the smallest power of two >= count
    three_quarters = power * 3 // 4
    return three_quarters if three_quarters >= count else power


def bucket_series(limit: int, floor: int = 1) -> list[int]:
    """Every bucket size up to the one that holds ``limit``."""
    sizes = [bucket_size(floor)]
    while sizes[-1] < limit:
        sizes.append(bucket_size(sizes[-1] + 1))
    return sizes


@dataclass(frozen=True, slots=True)
class ShapeBuckets:
    pad_token_id: int
    max_tokens: int  # the model's longest input: a token bucket never passes it (position embeddings end there)
    # a bucket's rows x tokens at most, where per-token outputs are wide (fill-mask's vocabulary): a batch whose
    # bucket would pass it runs as it is, so padding never grows outputs past the batcher's cap on them
    max_padded_tokens: int | None = None

    def shape(self, rows: int, tokens: int) -> tuple[int, int]:
        """The bucket a batch of ``rows`` rows of ``tokens`` padded tokens runs as."""
        return bucket_size(rows), max(tokens, min(bucket_size(tokens, MIN_TOKENS), self.max_tokens))

    def pad(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``feeds`` (each (B, T)) grown to their bucket: pad tokens with attention 0 to the right, copies of the
        last row below; the same arrays when the batch already has a bucket's shape."""
        rows, tokens = feeds["input_ids"].shape
        to_rows, to_tokens = self.shape(rows, tokens)
        if (to_rows, to_tokens) == (rows, tokens) or not self.fits(to_rows, to_tokens):
            return feeds
        grown = {}
        for name, array in feeds.items():
            out = np.full((to_rows, to_tokens), self.pad_token_id if name == "input_ids" else 0, dtype=array.dtype)
            out[:rows, :tokens] = array
            out[rows:, :tokens] = array[rows - 1]
            grown[name] = out
        return grown

    def fits(self, rows: int, tokens: int) -> bool:
        return self.max_padded_tokens is None or rows * tokens <= self.max_padded_tokens

    def shapes(self, max_rows: int, max_batch_tokens: int) -> list[tuple[int, int]]:
        """Every bucket a batch of the batcher's limits can land in (at most ``max_rows`` rows; rows x longest row
        within ``max_batch_tokens``, or one row of any length), by padded size, smallest first."""
        token_sizes = bucket_series(self.max_tokens, MIN_TOKENS)
        found: set[tuple[int, int]] = set()
        smallest_rows = 1
        for row_size in bucket_series(max_rows):
            longest = self.max_tokens if smallest_rows == 1 else min(self.max_tokens, max_batch_tokens // smallest_rows)
            found.update(self.shape(row_size, size) for size in token_sizes if size <= bucket_size(longest, MIN_TOKENS))
            smallest_rows = row_size + 1
            if smallest_rows > max_rows or max_batch_tokens // smallest_rows < 1:
                break
        return sorted((shape for shape in found if self.fits(*shape)), key=lambda shape: (shape[0] * shape[1], shape))

    def warm_up(
        self,
        runner: Runs,
        cls_id: int,
        sep_id: int,
        max_rows: int,
        max_batch_tokens: int,
        seconds: float = WARM_UP_SECONDS,
    ) -> tuple[int, int]:
        """Run a batch of each of ``shapes()`` once on ``runner``, smallest first, until ``seconds`` have passed;
        (shapes run, shapes in all)."""
        shapes = self.shapes(max_rows, max_batch_tokens)
        started, done = time.perf_counter(), 0
        for rows, tokens in shapes:
            if time.perf_counter() - started > seconds:
                break
            ids = np.full((rows, tokens), cls_id, dtype=np.int64)
            ids[:, -1] = sep_id
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
            runner.run(PaddedRows(feeds, [tokens] * rows))
            done += 1
        return done, len(shapes)
