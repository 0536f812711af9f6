"""What the embeddings tests compare: cosines to an oracle, and nearest-neighbour order over a sentence set."""

from __future__ import annotations

import numpy as np


def cosines(reference: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity, in float64."""
    reference, got = np.asarray(reference, np.float64), np.asarray(got, np.float64)
    return (reference * got).sum(axis=-1) / (np.linalg.norm(reference, axis=-1) * np.linalg.norm(got, axis=-1))


def similarities(vectors: np.ndarray) -> np.ndarray:
    unit = np.asarray(vectors, np.float64)
    unit = unit / np.linalg.norm(unit, axis=-1, keepdims=True)
    return unit @ unit.T


def assert_same_neighbours(reference: np.ndarray, got: np.ndarray, tie: float = 1e-4, top: int | None = None) -> None:
    """Each sentence's ``top`` nearest neighbours (default: all) by ``got`` are the reference's, in its order.

    The k-th neighbour by ``got`` must be as similar, by the reference, as the reference's own k-th neighbour, to
    within ``tie``: neighbours whose reference similarities are that close may swap.
    """
    expected, found = similarities(reference), similarities(got)
    for row in range(len(expected)):
        others = [column for column in range(len(expected)) if column != row]
        count = len(others) if top is None else top
        by_got = sorted(others, key=lambda column: -found[row, column])[:count]
        best = np.sort(expected[row, others])[::-1][:count]
        chosen = expected[row, by_got]
        assert (chosen >= best - tie).all(), f"sentence {row}: neighbours {by_got} (similarities {chosen}), not {best}"
