"""The relevance head's targets and loss (``--relevance-head``): a cross-encoder for rerank, one output trained with
binary cross-entropy on its logit (sentence-transformers' CrossEncoder loss), targets in [0, 1]."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from training.data import DataError, check_labels
from training.train import TensorBatch


def relevance_targets(path: Path, labels: Sequence[str], named: Sequence[str] | None) -> list[float]:
    """Rerank targets: with ``named`` (two labels, not relevant first) 0.0 / 1.0, else numbers in [0, 1]."""
    if named:
        if len(named) != 2:
            raise DataError(f"a relevance head needs two --labels (not relevant, relevant), got {len(named)}")
        check_labels(path, labels, named)
        return [float(named.index(label)) for label in labels]
    targets = []
    for label in labels:
        try:
            target = float(label)
        except ValueError:
            raise DataError(
                f"{path}: label {label!r} is not a number: give --labels NOT_RELEVANT,RELEVANT for named labels"
            ) from None
        if not 0.0 <= target <= 1.0:
            raise DataError(f"{path}: relevance {label} is outside [0, 1]")
        targets.append(target)
    return targets


def relevance_loss(model: nn.Module, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, float]]:
    logits = model(**{key: value for key, value in batch.items() if key != "labels"})["logits"].squeeze(-1)
    return F.binary_cross_entropy_with_logits(logits.float(), batch["labels"].float()), {}
