"""Evaluation metrics computed the way the field reports them.

- classification: accuracy and macro-F1 (unweighted mean over the labels seen in gold or predictions, as
  scikit-learn's `f1_score(average="macro")`).
- SQuAD: exact match and token F1 after the official evaluate-v1.1 normalisation, max over gold answers, x100.
- NER: entity-level precision / recall / F1 with conlleval's chunk rules (IOB1, IOB2, IOE and IOBES tags).
- MLM: top-1 / top-5 accuracy over the labelled positions and perplexity = exp(mean cross-entropy).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch


def accuracy(gold: Sequence[object], predicted: Sequence[object]) -> float:
    if len(gold) != len(predicted) or not gold:
        raise ValueError("accuracy needs two equally long, non-empty sequences")
    return sum(g == p for g, p in zip(gold, predicted, strict=True)) / len(gold)


def macro_f1(gold: Sequence[object], predicted: Sequence[object]) -> float:
    labels = set(gold) | set(predicted)
    scores = []
    for label in labels:
        true_positive = sum(g == label and p == label for g, p in zip(gold, predicted, strict=True))
        predicted_count = sum(p == label for p in predicted)
        gold_count = sum(g == label for g in gold)
        denominator = predicted_count + gold_count
        scores.append(2 * true_positive / denominator if denominator else 0.0)
    return sum(scores) / len(scores)


def classification_metrics(gold: Sequence[int], predicted: Sequence[int]) -> dict[str, float]:
    return {"accuracy": accuracy(gold, predicted), "macro_f1": macro_f1(gold, predicted)}


# --- SQuAD (official evaluate-v1.1.py normalisation) ---------------------------------------------------------


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, drop the articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str) -> float:
    predicted_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not predicted_tokens or not gold_tokens:
        # SQuAD v2.0 convention: two empty answers agree, one empty answer scores 0.
        return float(predicted_tokens == gold_tokens)
    common = Counter(predicted_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: dict[str, str], gold_answers: dict[str, Sequence[str]]) -> dict[str, float]:
    """predictions: id -> text; gold_answers: id -> answer texts ([] for unanswerable -> gold is '')."""
    exact = f1 = 0.0
    for qas_id, answers in gold_answers.items():
        golds = list(answers) or [""]
        prediction = predictions.get(qas_id, "")
        exact += max(squad_exact_match(prediction, gold) for gold in golds)
        f1 += max(squad_f1(prediction, gold) for gold in golds)
    total = len(gold_answers)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# --- NER (conlleval) -------------------------------------------------------------------------------------------


def _split_tag(tag: str) -> tuple[str, str]:
    prefix, dash, entity_type = tag.partition("-")
    return (prefix, entity_type) if dash else (tag, "")


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, entity_type: str) -> bool:
    return (
        prev_tag in ("E", "S", "]", "[")
        or (prev_tag in ("B", "I") and tag in ("B", "S", "O"))
        or (prev_tag not in ("O", ".") and prev_type != entity_type)
    )


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, entity_type: str) -> bool:
    return (
        tag in ("B", "S", "[", "]")
        or (prev_tag in ("E", "S", "O") and tag in ("E", "I"))
        or (tag not in ("O", ".") and prev_type != entity_type)
    )


def chunks(tags: Sequence[str]) -> set[tuple[int, int, str]]:
    """(first token, last token, type) of every chunk, by conlleval's startOfChunk / endOfChunk rules."""
    found: set[tuple[int, int, str]] = set()
    prev_tag, prev_type, start = "O", "", -1
    for index, tag in enumerate([*tags, "O"]):
        tag_prefix, entity_type = _split_tag(tag)
        if start >= 0 and _end_of_chunk(prev_tag, tag_prefix, prev_type, entity_type):
            found.add((start, index - 1, prev_type))
            start = -1
        if _start_of_chunk(prev_tag, tag_prefix, prev_type, entity_type):
            start = index
        prev_tag, prev_type = tag_prefix, entity_type
    return found


@dataclass
class ChunkCounts:
    correct: int = 0
    predicted: int = 0
    gold: int = 0

    def scores(self) -> dict[str, float]:
        precision = self.correct / self.predicted if self.predicted else 0.0
        recall = self.correct / self.gold if self.gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1}


def entity_metrics(gold: Iterable[Sequence[str]], predicted: Iterable[Sequence[str]]) -> dict[str, float]:
    """Per-sentence tag sequences -> overall and per-type precision / recall / F1, plus token accuracy."""
    overall = ChunkCounts()
    per_type: dict[str, ChunkCounts] = {}
    tokens = correct_tokens = 0
    for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError("gold and predicted sentences differ in length")
        tokens += len(gold_tags)
        correct_tokens += sum(g == p for g, p in zip(gold_tags, predicted_tags, strict=True))
        gold_chunks, predicted_chunks = chunks(gold_tags), chunks(predicted_tags)
        pairs = ((gold_chunks, "gold"), (predicted_chunks, "predicted"), (gold_chunks & predicted_chunks, "correct"))
        for chunk_set, field in pairs:
            for *_, entity_type in chunk_set:
                counts = per_type.setdefault(entity_type, ChunkCounts())
                setattr(counts, field, getattr(counts, field) + 1)
                setattr(overall, field, getattr(overall, field) + 1)
    result = overall.scores()
    result["token_accuracy"] = correct_tokens / tokens if tokens else 0.0
    for entity_type, counts in sorted(per_type.items()):
        result.update({f"{entity_type}_{name}": value for name, value in counts.scores().items()})
    return result


# --- masked language modelling ---------------------------------------------------------------------------------


@dataclass
class MlmAccumulator:
    """Accumulates top-1 / top-5 hits and summed cross-entropy over batches of (logits, labels)."""

    top1: int = 0
    top5: int = 0
    count: int = 0
    loss_sum: float = 0.0

    def add(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """logits: (batch, seq, vocab); labels: (batch, seq) with -100 at unscored positions."""
        scored = labels != -100
        if not scored.any():
            return
        picked_logits, picked_labels = logits[scored].float(), labels[scored]
        top = picked_logits.topk(min(5, picked_logits.shape[-1]), dim=-1).indices
        self.top1 += int((top[:, 0] == picked_labels).sum())
        self.top5 += int((top == picked_labels[:, None]).any(dim=-1).sum())
        self.count += int(scored.sum())
        self.loss_sum += float(torch.nn.functional.cross_entropy(picked_logits, picked_labels, reduction="sum"))

    def scores(self) -> dict[str, float]:
        if not self.count:
            return {"mlm_top1_accuracy": 0.0, "mlm_top5_accuracy": 0.0, "mlm_loss": math.nan, "perplexity": math.nan}
        mean_loss = self.loss_sum / self.count
        return {
            "mlm_top1_accuracy": self.top1 / self.count,
            "mlm_top5_accuracy": self.top5 / self.count,
            "mlm_loss": mean_loss,
            "perplexity": math.exp(min(mean_loss, 700.0)),
        }
