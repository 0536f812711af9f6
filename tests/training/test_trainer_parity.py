"""The fine-tuning loop against transformers' Trainer on one family (RoBERTa, a tiny random checkpoint): the same
data, seed, batch size and schedule (AdamW without decay on biases and LayerNorm weights, linear warmup then decay,
clipping at 1.0) give the same training-loss curve within noise. What differs between the two runs is only what
each draws from the seed (the head's initial weights, the shuffling, dropout masks)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.training.test_families import keyword_options
from training.finetune import finetune
from training.train import Runtime

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

EVERY = 10  # steps per point of the curve
SETTINGS = {"epochs": 4.0, "batch_size": 16, "learning_rate": 2e-3, "warmup_ratio": 0.1, "seed": 0}


def trainer_curve(base: Path, train_file: Path, out: Path) -> list[float]:
    """transformers' Trainer on the same rows, labels and settings: its logged training loss every ``EVERY`` steps."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(base)
    with train_file.open() as handle:
        rows = list(csv.DictReader(handle))
    labels = {"negative": 0, "positive": 1}
    train = [
        {**tokenizer(row["sentence"], truncation=True, max_length=32), "labels": labels[row["label"]]} for row in rows
    ]  # a list is a map-style dataset to the Trainer
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        base, num_labels=2, id2label={0: "negative", 1: "positive"}, label2id=labels
    )
    arguments = transformers.TrainingArguments(
        output_dir=str(out), num_train_epochs=SETTINGS["epochs"], per_device_train_batch_size=SETTINGS["batch_size"],
        learning_rate=SETTINGS["learning_rate"], warmup_ratio=SETTINGS["warmup_ratio"], weight_decay=0.01,
        lr_scheduler_type="linear", max_grad_norm=1.0, seed=SETTINGS["seed"], logging_steps=EVERY, save_strategy="no",
        report_to=[], use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    collator = transformers.DataCollatorWithPadding(tokenizer)
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=train, data_collator=collator)
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def test_our_loop_and_the_trainer_reach_the_same_loss_curve(tmp_path: Path) -> None:
    from model_export.family_checkpoints import build_family_checkpoint

    base = build_family_checkpoint("roberta", "feature-extraction", tmp_path / "base")
    options = keyword_options(base, tmp_path, "ours", eval_every_steps=EVERY, **SETTINGS)
    ours = [point["train_loss"] for point in finetune(options, Runtime())["history"]]
    theirs = trainer_curve(base, options.train_file, tmp_path / "trainer")
    points = min(len(ours), len(theirs))
    assert points >= 7, (ours, theirs)  # 80 steps: 8 points each (ours adds the last window again at the end)
    ours, theirs = ours[:points], theirs[:points]
    assert ours[0] > 0.5 and theirs[0] > 0.5  # both start near ln 2 (two balanced labels)
    assert ours[-1] < 0.5 * ours[0] and theirs[-1] < 0.5 * theirs[0]  # and both learn the task
    gaps = [abs(a - b) for a, b in zip(ours, theirs, strict=True)]
    assert sum(gaps) / points < 0.12 and max(gaps) < 0.3, (ours, theirs)
