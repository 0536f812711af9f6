from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from training.model import BertConfig, BertForSequenceClassification
from training.train import Runtime, TrainingArguments, linear_schedule, parameter_groups, train


def tiny_classifier() -> BertForSequenceClassification:
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_labels=2
    )
    return BertForSequenceClassification(config)


def test_no_weight_decay_on_biases_and_layer_norm() -> None:
    model = tiny_classifier()
    decay, no_decay = parameter_groups(model, weight_decay=0.1)
    names = {id(p): name for name, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    not_decayed = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert decayed | not_decayed == set(names.values()) and not decayed & not_decayed
    assert "bert.embeddings.LayerNorm.weight" in not_decayed
    assert "bert.encoder.layer.0.output.LayerNorm.weight" in not_decayed
    assert "classifier.bias" in not_decayed
    assert "bert.embeddings.word_embeddings.weight" in decayed
    assert "bert.encoder.layer.0.attention.self.query.weight" in decayed
    assert all(n.endswith("bias") or "LayerNorm" in n for n in not_decayed)
    assert not any(n.endswith("bias") or "LayerNorm" in n for n in decayed)


def test_layer_decay_lowers_the_learning_rate_towards_the_embeddings() -> None:
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32, num_labels=2
    )
    model = BertForSequenceClassification(config)
    groups = parameter_groups(model, weight_decay=0.1, learning_rate=1.0, layer_decay=0.5)
    group_of = {id(p): group for group in groups for p in group["params"]}
    lr_of = {name: group_of[id(p)]["lr"] for name, p in model.named_parameters()}
    assert lr_of["classifier.weight"] == 1.0 and lr_of["bert.pooler.dense.weight"] == 1.0
    assert lr_of["bert.encoder.layer.2.output.dense.weight"] == 0.5
    assert lr_of["bert.encoder.layer.0.attention.self.query.bias"] == 0.125
    assert lr_of["bert.embeddings.word_embeddings.weight"] == 0.0625
    assert len(lr_of) == len(list(model.parameters()))
    assert {g["weight_decay"] for g in groups if any(p is model.classifier.bias for p in g["params"])} == {0.0}


def test_linear_warmup_then_linear_decay() -> None:
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2.0)
    scheduler = linear_schedule(optimizer, warmup_steps=10, total_steps=50)
    rates = []
    for _ in range(50):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    rates.append(scheduler.get_last_lr()[0])
    expected = [2.0 * (s / 10 if s < 10 else (50 - s) / 40) for s in range(51)]
    assert rates == pytest.approx(expected)
    assert max(rates) == pytest.approx(2.0) and rates.index(max(rates)) == 10 and rates[-1] == 0.0


class LinearRegression(nn.Module):
    """y = w . x; loss = mean squared error; no randomness, so accumulated and plain batches must agree."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(3))

    def forward(self, input_ids: torch.Tensor, targets: torch.Tensor, **_: torch.Tensor) -> dict[str, torch.Tensor]:
        prediction = input_ids.float() @ self.weight
        return {"loss": ((prediction - targets.float()) ** 2).mean()}


def regression_features(n: int = 16) -> list[dict[str, list[int]]]:
    generator = torch.Generator().manual_seed(0)
    xs = torch.randint(0, 5, (n, 3), generator=generator)
    return [{"input_ids": x.tolist(), "targets": [int(x @ torch.tensor([1, -2, 3]))]} for x in xs]


def stack(features):
    return {
        "input_ids": torch.tensor([f["input_ids"] for f in features]),
        "targets": torch.tensor([f["targets"][0] for f in features]),
    }


def run_regression(tmp_path: Path, batch_size: int, grad_accum: int, **evaluation) -> tuple[LinearRegression, dict]:
    model = LinearRegression()
    saved: list[torch.Tensor] = []
    args = TrainingArguments(
        epochs=3, batch_size=batch_size, grad_accum=grad_accum, learning_rate=0.05, warmup_ratio=0.0, weight_decay=0.0
    )
    report = train(
        model,
        regression_features(),
        stack,
        args,
        tmp_path,
        lambda m, _: saved.append(m.weight.detach().clone()),
        Runtime(),
        **evaluation,
    )
    report["saved"] = saved
    return model, report


def test_gradient_accumulation_matches_a_larger_batch(tmp_path: Path) -> None:
    accumulated, _ = run_regression(tmp_path / "a", batch_size=2, grad_accum=2)
    plain, report = run_regression(tmp_path / "b", batch_size=4, grad_accum=1)
    assert torch.allclose(accumulated.weight, plain.weight, atol=1e-6)
    assert report["settings"]["total_steps"] == 12
    assert not torch.equal(plain.weight, torch.zeros(3))


def test_best_evaluation_is_saved_and_reported(tmp_path: Path) -> None:
    scores = iter([0.5, 0.9, 0.7])
    _, report = run_regression(
        tmp_path, batch_size=4, grad_accum=1, evaluate=lambda m: {"score": next(scores)}, primary_metric="score"
    )
    assert [h["score"] for h in report["history"]] == [0.5, 0.9, 0.7]
    assert [h["step"] for h in report["history"]] == [4, 8, 12]
    assert len(report["saved"]) == 2  # after epoch 1 (first) and epoch 2 (better); epoch 3 is worse
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["best"]["score"] == 0.9 and written["best"]["epoch"] == 2.0
    assert written["history"][0]["train_loss"] > written["history"][-1]["train_loss"]
