"""Knowledge distillation from an ensemble of our own fine-tunes (Hinton et al. 2015, "Distilling the Knowledge in
a Neural Network").

Teachers are checkpoints of the same task and labels as the student, typically the same recipe trained with other
seeds. Their ensemble is the mean of each teacher's log-probabilities (over labels for classification, over
positions for span QA); it scores each training feature once, before training. The student then learns

    loss = alpha * hard loss (the task's own, on the gold labels)
         + (1 - alpha) * T^2 * KL(ensemble at temperature T || student at temperature T)

so one model of the teachers' size serves what the ensemble learned. Tasks: text-classification (not the relevance
head) and question-answering.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from training.data import DataError, Feature
from training.evaluation import Predict
from training.train import LossFunction, TensorBatch

logger = logging.getLogger(__name__)

# The outputs each task distils, over the last dimension: labels (B, L), or positions (B, T).
DISTILLED_OUTPUTS = {"text-classification": ("logits",), "question-answering": ("start_logits", "end_logits")}
TEACHER_PREFIX = "teacher_"
# Padded positions of a teacher's per-token log-probabilities: no probability mass, yet finite so KL stays finite.
MASKED_LOGIT = -1e4


@dataclass(frozen=True)
class DistillOptions:
    teachers: tuple[Path, ...]
    alpha: float = 0.5  # weight of the gold-label loss; 1 - alpha goes to the ensemble's distribution
    temperature: float = 2.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise DataError(f"--distill-alpha must be in [0, 1], got {self.alpha}")
        if self.temperature <= 0:
            raise DataError(f"--distill-temperature must be positive, got {self.temperature}")


class Ensemble(nn.Module):
    """Teachers behind one forward: each output the mean of the teachers' log-softmax over its last dimension."""

    def __init__(self, teachers: Sequence[nn.Module], keys: Sequence[str]):
        super().__init__()
        self.teachers = nn.ModuleList(teachers)
        self.keys = tuple(keys)

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        outputs = [teacher(**inputs) for teacher in self.teachers]
        mask = inputs["attention_mask"].bool()  # (B, T): per-token outputs leave padding out of the softmax
        averaged = {}
        for key in self.keys:
            stacked = torch.stack([output[key].float() for output in outputs])  # (N, B, L) or (N, B, T)
            if stacked.shape[-1] == mask.shape[-1] and key != "logits":
                stacked = stacked.masked_fill(~mask, MASKED_LOGIT)
            averaged[key] = stacked.log_softmax(-1).mean(0)
        return averaged


def distilled_outputs(task: str, relevance_head: bool = False) -> tuple[str, ...]:
    if task not in DISTILLED_OUTPUTS or relevance_head:
        head = "the relevance head" if relevance_head else task
        raise DataError(f"distillation is built for {' and '.join(DISTILLED_OUTPUTS)}, not for {head}")
    return DISTILLED_OUTPUTS[task]


def check_teacher(teacher: Path, teacher_labels: dict[int, str], student_labels: dict[int, str] | None) -> None:
    if student_labels is not None and teacher_labels != student_labels:
        raise DataError(f"teacher {teacher} has labels {teacher_labels}, the student {student_labels}")


def attach_targets(
    features: Sequence[Feature], ensemble: nn.Module, keys: Sequence[str], predict: Predict
) -> list[Feature]:
    """A copy of each feature with the ensemble's log-probabilities under ``teacher_<key>`` (float lists)."""
    ensemble.eval()
    outputs = predict(ensemble, features)
    return [
        cast(Feature, {**feature, **{TEACHER_PREFIX + key: output[key].tolist() for key in keys}})
        for feature, output in zip(features, outputs, strict=True)
    ]


def distillation_collate(
    collate_fn: Callable[[Sequence[Feature]], TensorBatch], keys: Sequence[str]
) -> Callable[[Sequence[Feature]], TensorBatch]:
    """The task's collate over the features without their teacher targets, then those padded to the batch."""
    names = [TEACHER_PREFIX + key for key in keys]

    def collate(features: Sequence[Feature]) -> TensorBatch:
        plain = [cast(Feature, {k: v for k, v in f.items() if k not in names}) for f in features]
        batch = collate_fn(plain)
        for name in names:
            rows = [cast(dict[str, Any], f)[name] for f in features]
            width = max(len(row) for row in rows)
            padded = [row + [MASKED_LOGIT] * (width - len(row)) for row in rows]
            batch[name] = torch.tensor(padded, dtype=torch.float32)
        return batch

    return collate


def soft_loss(student: torch.Tensor, teacher_log_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL(teacher || student), both softened by T; (B, K) each, mean over the batch."""
    student_log_probs = (student.float() / temperature).log_softmax(-1)
    teacher_soft = (teacher_log_probs / temperature).log_softmax(-1)
    kl = F.kl_div(student_log_probs, teacher_soft, log_target=True, reduction="batchmean")
    return kl * temperature**2


def distillation_loss(keys: Sequence[str], options: DistillOptions) -> LossFunction:
    names = {TEACHER_PREFIX + key: key for key in keys}

    def loss(model: nn.Module, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, float]]:
        inputs = {key: value for key, value in batch.items() if key not in names}
        outputs = model(**inputs)
        mask = batch["attention_mask"].bool()
        soft_parts = []
        for name, key in names.items():
            student = outputs[key]
            if student.dim() == 2 and key != "logits":
                student = student.masked_fill(~mask, MASKED_LOGIT)  # per-token: padding is no candidate
            soft_parts.append(soft_loss(student, batch[name], options.temperature))
        soft = torch.stack(soft_parts).mean()
        hard = outputs["loss"]
        total = options.alpha * hard + (1.0 - options.alpha) * soft
        return total, {"hard_loss": float(hard.detach()), "soft_loss": float(soft.detach())}

    return loss


def ensemble_report(evaluate: Callable[[nn.Module], dict[str, float]] | None, ensemble: nn.Module) -> dict[str, Any]:
    """The ensemble's own eval scores (what the student is distilled towards), logged and kept in metrics.json."""
    if evaluate is None:
        return {}
    scores = evaluate(ensemble)
    logger.info("teachers' ensemble on the eval set: %s", scores)
    return scores
