"""Model runners for engine-side tests: no ORT, outputs that tell which row they came from."""

from __future__ import annotations

import threading

import numpy as np

from contract.onnx_io import PaddedRows
from service.tasks.base import ModelRow


def seq(ids: list[int]) -> ModelRow:
    array = np.asarray(ids, dtype=np.int64)
    return ModelRow(array, np.zeros_like(array))


class EchoRunner:
    """``echo`` (B, T) = input_ids * 2 (token-level); ``total`` (B,) = sum of the real ids.

    Records every batch it sees; can block on ``gate`` and fail on batches holding ``poison``.
    """

    output_names = ("echo", "total")
    token_level = frozenset({"echo"})

    def __init__(self, gate: threading.Event | None = None, poison: int | None = None) -> None:
        self.gate = gate
        self.poison = poison
        self.entered = threading.Event()
        self.batches: list[PaddedRows] = []
        self.lock = threading.Lock()

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        with self.lock:
            self.batches.append(batch)
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.poison is not None and bool((batch.input_ids == self.poison).any()):
            raise RuntimeError("poisoned batch")
        return {"echo": batch.input_ids * 2, "total": (batch.input_ids * batch.attention_mask).sum(axis=1)}

    def seen_ids(self) -> set[int]:
        with self.lock:
            return {int(value) for batch in self.batches for value in batch.input_ids[batch.attention_mask == 1]}
