"""The losses of the task models (training/model.py), by Hugging Face's rules."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits (B, T, V) or (N, V), labels (B, T) or (N,) -> mean cross entropy over the labels that are not -100.

    A batch with no such position (a few short lines can draw no [MASK] at all) gives 0, not the NaN of a plain
    mean over nothing, and that 0 still backpropagates (zero gradients). Computed in float32 under autocast too.
    """
    total = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), reduction="sum")
    return total / labels.ne(-100).sum().clamp(min=1)


def sequence_classification_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str | None) -> torch.Tensor:
    """HF's rule: without a problem_type, one label means regression, integer labels single-label, else multi-label."""
    num_labels = logits.size(-1)
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
