"""What start-up tuning measures with (``service.tuning``): synthetic batches timed on a runner, the sweeps' rates
and knees, the time budget, the cost of one measurement on a model, and a GPU's memory as the batches grow."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from contract.onnx_io import PaddedRows, pad_rows
from service.sessions import ModelRunner

THREADS_PROBE_ROWS = 4
TIMED_RUNS = 3
WITHIN_BEST = 0.95  # a smaller setting within 5 % of the best throughput wins
GPU_MEMORY_SHARE = 0.5  # the activations of the largest batch tried may take this much of the GPU memory left free


class Clock:
    """The tuner's time budget, from when it began."""

    def __init__(self, budget_s: float) -> None:
        self.started = time.perf_counter()
        self.budget_s = budget_s

    def allows(self, seconds: float, share: float = 1.0) -> bool:
        """Whether ``seconds`` more fit in the first ``share`` of the budget (a stage's part, plus what earlier
        stages left)."""
        return time.perf_counter() + seconds <= self.started + share * self.budget_s

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def synthetic_batch(rows: int, length: int, cls_id: int, sep_id: int, vocab_size: int) -> PaddedRows:
    """``rows`` rows of ``length`` tokens: [CLS] fixed pseudo-random words [SEP] (same every run)."""
    rng = np.random.default_rng(0)
    low = min(max(cls_id, sep_id) + 1, vocab_size - 1)
    words = rng.integers(low, vocab_size, size=(rows, max(0, length - 2)))
    ids = [[cls_id, *row.tolist(), sep_id][:length] for row in words]
    return pad_rows([(row, [0] * len(row)) for row in ids], pad_token_id=0)


@dataclass
class Sweep:
    """Tokens per second measured per candidate, and the one picked."""

    rates: dict[int, float] = field(default_factory=dict)
    last_seconds: float = 0.0
    cut_short: bool = False  # the budget ended it while its last step still gained: no knee seen

    def knee(self) -> int:
        """The smallest candidate within WITHIN_BEST of the best rate."""
        best = max(self.rates.values())
        return min(value for value, rate in self.rates.items() if rate >= WITHIN_BEST * best)


SLOW_CALL_S = 0.05  # calls this slow are timed once after the warm-up call: their own noise is small


def time_batch(runner: ModelRunner, batch: PaddedRows, runs: int = TIMED_RUNS) -> float:
    """Seconds per call: the best of ``runs`` after one warm-up call (first-shape allocations)."""
    runner.run(batch)
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        runner.run(batch)
        best = min(best, time.perf_counter() - started)
    return max(best, 1e-9)


@dataclass(frozen=True)
class CallCost:
    """What one timed measurement costs on this model: from one timed call of a 1-row long batch and the time one
    session took to build."""

    row_s: float  # one long row
    build_s: float

    @property
    def runs(self) -> int:
        return 1 if self.row_s * THREADS_PROBE_ROWS >= SLOW_CALL_S else TIMED_RUNS

    def measurement_s(self, rows: int) -> float:
        return (self.runs + 1) * rows * self.row_s

    def least_plan_s(self, thread_options: int, most_runs: int = 1) -> float:
        """Every thread candidate, the widest run gate, then two sizes of each row sweep (1 and 2 long rows; short
        rows cost less)."""
        threads = thread_options * self.measurement_s(THREADS_PROBE_ROWS) + (thread_options - 1) * self.build_s
        runs = most_runs * self.measurement_s(THREADS_PROBE_ROWS) if most_runs > 1 else 0.0
        return threads + runs + 2 * self.measurement_s(3)


class GpuMemory:
    """What the batches tried took of a GPU's free memory, and whether a larger one would stay inside the budget
    (``GPU_MEMORY_SHARE`` of what was free when tuning began): an fp16 graph's activations take half an fp32 one's,
    so it is measured, not assumed. ``read``: the GPU's free bytes now (None: unknown, and nothing is refused)."""

    def __init__(self, read: Callable[[], int | None], share: float = GPU_MEMORY_SHARE) -> None:
        self.read = read
        self.free_at_start = read()
        self.budget = None if self.free_at_start is None else int(share * self.free_at_start)
        self.used: dict[int, int] = {}  # batch tokens -> bytes taken since tuning began, once it had run

    def observe(self, tokens: int) -> None:
        free = self.read()
        if free is not None and self.free_at_start is not None:
            self.used[tokens] = max(self.used.get(tokens, 0), self.free_at_start - free)

    def fits(self, tokens: int) -> bool:
        """Whether a batch of ``tokens`` should fit: the growth between the two largest batches tried, extended."""
        if self.budget is None or not self.used:
            return True
        sizes = sorted(self.used)
        last = sizes[-1]
        if len(sizes) == 1:
            per_token = self.used[last] / last
        else:
            before = sizes[-2]
            per_token = max(0.0, (self.used[last] - self.used[before]) / (last - before))
        return self.used[last] + per_token * max(0, tokens - last) <= self.budget
