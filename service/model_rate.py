"""A model's measured time per token: what admission turns queued and requested tokens into seconds with.

One worker's model time per real token, from batches of at least ``min_tokens`` (smaller ones are mostly the call's
own overhead): an average weighted ``RATE_SMOOTHING`` to the newest batch. Two refinements keep a rate measured while
other work shared the cores from deciding too much: the fastest batch measured is kept as what the model does alone
(a request too big even at that rate is the request's problem, 413; slower is the load's, 429), and while no batch is
measured the average relaxes back towards it, since refused requests run no batch that could measure it again.
"""

from __future__ import annotations

import math
import time

RATE_SMOOTHING = 0.2  # weight of the newest batch in the seconds-per-token average
# With no batch measured for this long, the estimate has gone (1 - 1/e) of the way back to the best rate.
RATE_STALE_S = 5.0


class ModelRate:
    def __init__(self, min_tokens: int) -> None:
        self.min_tokens = min_tokens
        self.average: float | None = None  # seconds per token, None until a large enough batch ran
        self.best = math.inf  # the fastest batch measured
        self.measured_at = 0.0  # time.perf_counter() of the last batch measured

    @property
    def seconds_per_token(self) -> float | None:
        """The average, relaxed towards ``best`` for the time no batch was measured."""
        known = self.average
        if known is None or known <= self.best:
            return known
        return self.best + (known - self.best) * math.exp((self.measured_at - time.perf_counter()) / RATE_STALE_S)

    def alone(self) -> float | None:
        """Seconds per token on cores nothing else is using: the best measured (None until measured)."""
        known = self.seconds_per_token
        return None if known is None else min(known, self.best)

    def record(self, real_tokens: int, elapsed_s: float) -> None:
        """Fold one batch's model time in (batches too small to tell are skipped)."""
        if elapsed_s <= 0 or real_tokens < self.min_tokens:
            return
        measured = elapsed_s / real_tokens
        self.best = min(self.best, measured)
        known, self.measured_at = self.seconds_per_token, time.perf_counter()
        self.average = measured if known is None else (1 - RATE_SMOOTHING) * known + RATE_SMOOTHING * measured

    def adopt(self, other: ModelRate) -> None:
        """Start from ``other``'s measurements (a model that computes as ``other``'s does), unless measured."""
        if self.average is None:
            self.average, self.best, self.measured_at = other.average, other.best, other.measured_at
