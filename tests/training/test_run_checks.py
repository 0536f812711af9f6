"""What fine-tuning warns about and refuses: too few optimiser steps, a result at or below the eval set's majority
class, an --out that already holds a run (without --overwrite); and the new head's notice says it is expected."""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import pytest

from tests.training.conftest import TINY_CORPUS
from tests.training.test_cli import TINY, tiny_base  # noqa: F401  (fixture)
from training.cli import main
from training.run_checks import (
    MIN_STEPS,
    Baseline,
    majority_baseline,
    warn_if_few_steps,
    warn_if_not_above_baseline,
)
from training.train import TrainingArguments, step_plan

SENTENCES = [sentence for line in TINY_CORPUS for sentence in line.split(". ")]


def rows_file(path: Path, count: int, labels: tuple[str, ...] = ("0", "1")) -> Path:
    rows = "".join(f"{SENTENCES[i % len(SENTENCES)]}\t{labels[i % len(labels)]}\n" for i in range(count))
    path.write_text("sentence\tlabel\n" + rows)
    return path


def finetune_argv(base: Path, train: Path, out: Path, *extra: str) -> list[str]:
    task = ["finetune", "--task", "text-classification", "--base", str(base), "--train", str(train)]
    return [*task, "--out", str(out), *TINY, *extra]


def batches(examples: int, world_size: int, batch_size: int) -> int:
    return math.ceil(math.ceil(examples / world_size) / batch_size)


def warnings_of(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]


def test_the_readme_newcomer_run_warns_about_its_steps_and_its_baseline(
    tiny_base: Path,  # noqa: F811
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """42 rows, batch 32, 2 epochs: 4 steps; an eval set of one label, so nothing can beat always answering it."""
    train = rows_file(tmp_path / "train.tsv", 42)
    dev = rows_file(tmp_path / "dev.tsv", 6, labels=("1",))
    argv = finetune_argv(tiny_base, train, tmp_path / "run", "--eval", str(dev), "--batch-size", "32", "--epochs", "2")
    caplog.set_level(logging.INFO)
    assert main(argv) == 0
    [steps, baseline] = warnings_of(caplog, "training.run_checks")
    assert steps.startswith("only 4 optimiser steps: 42 training examples in batches of 32 for 2 epochs")
    assert "--epochs 25 or --batch-size 1" in steps
    accuracy = json.loads((tmp_path / "run" / "metrics.json").read_text())["best"]["accuracy"]
    assert f"accuracy on --eval, {accuracy:.4f}, is not above the majority-class baseline 1.0000" in baseline
    assert "always answering '1'" in baseline
    head = [r for r in caplog.records if r.name == "training.checkpoint" and "newly initialised" in r.getMessage()]
    assert [r.levelno for r in head] == [logging.INFO]
    assert "classifier.weight" in head[0].getMessage() and "as expected" in head[0].getMessage()


@pytest.mark.parametrize(
    ("examples", "batch_size", "epochs", "grad_accum", "world_size"),
    [(42, 32, 2.0, 1, 1), (300, 16, 1.0, 2, 1), (100, 8, 3.0, 1, 2), (10, 32, 1.0, 1, 1)],
)
def test_a_short_run_names_its_figures_and_remedies_that_reach_the_minimum(
    examples: int, batch_size: int, epochs: float, grad_accum: int, world_size: int, caplog: pytest.LogCaptureFixture
) -> None:
    args = TrainingArguments(epochs=epochs, batch_size=batch_size, grad_accum=grad_accum)
    with caplog.at_level(logging.WARNING, logger="training.run_checks"):
        warn_if_few_steps(examples, args, world_size)
    [message] = warnings_of(caplog, "training.run_checks")
    per_epoch = batches(examples, world_size, batch_size)
    steps = step_plan(per_epoch, args)[1]
    assert steps < MIN_STEPS
    assert message.startswith(f"only {steps} optimiser steps: {examples} training examples in batches of {batch_size}")
    assert f"for {epochs:g} epochs" in message
    assert (f"x {grad_accum} accumulated" in message) == (grad_accum > 1)
    assert (f"on each of {world_size} processes" in message) == (world_size > 1)
    more_epochs = int(re.search(r"--epochs (\d+)", message)[1])  # type: ignore[index]
    assert step_plan(per_epoch, TrainingArguments(epochs=more_epochs, grad_accum=grad_accum))[1] >= MIN_STEPS
    assert step_plan(per_epoch, TrainingArguments(epochs=more_epochs - 1, grad_accum=grad_accum))[1] < MIN_STEPS
    smaller = re.search(r"--batch-size (\d+)", message)
    if smaller is not None:
        size = int(smaller[1])
        assert step_plan(batches(examples, world_size, size), args)[1] >= MIN_STEPS
        assert step_plan(batches(examples, world_size, size + 1), args)[1] < MIN_STEPS


def test_enough_steps_or_an_explicit_max_steps_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="training.run_checks"):
        warn_if_few_steps(1600, TrainingArguments(epochs=1.0, batch_size=32))  # exactly 50
        warn_if_few_steps(42, TrainingArguments(epochs=2.0, batch_size=32, max_steps=10))
    assert warnings_of(caplog, "training.run_checks") == []
    with caplog.at_level(logging.WARNING, logger="training.run_checks"):
        warn_if_few_steps(1599, TrainingArguments(epochs=1.0, batch_size=32))  # still 50 batches, the last one short
        warn_if_few_steps(1568, TrainingArguments(epochs=1.0, batch_size=32))  # 49
    assert len(warnings_of(caplog, "training.run_checks")) == 1


def test_the_majority_baseline_is_the_most_common_eval_label_and_must_be_beaten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert majority_baseline(["neg", "pos", "pos", "neutral"]) == Baseline("pos", 0.5)
    assert majority_baseline([]) is None
    baseline = Baseline("pos", 0.5)
    with caplog.at_level(logging.WARNING, logger="training.run_checks"):
        warn_if_not_above_baseline({"accuracy": 0.75}, "accuracy", baseline)
        warn_if_not_above_baseline({"f1": 0.1}, "accuracy", baseline)
        warn_if_not_above_baseline({"accuracy": 0.1}, "accuracy", None)
        warn_if_not_above_baseline(None, "accuracy", baseline)
    assert warnings_of(caplog, "training.run_checks") == []
    with caplog.at_level(logging.WARNING, logger="training.run_checks"):
        warn_if_not_above_baseline({"accuracy": 0.5}, "accuracy", baseline)
        warn_if_not_above_baseline({"accuracy": 1 / 6}, "accuracy", baseline)
    equal, below = warnings_of(caplog, "training.run_checks")
    assert "0.5000, is not above the majority-class baseline 0.5000 (always answering 'pos'" in equal
    assert "0.1667, is not above the majority-class baseline 0.5000" in below


def test_an_out_folder_holding_a_run_is_refused_unless_overwrite(
    tiny_base: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    train = rows_file(tmp_path / "train.tsv", 8)
    out = tmp_path / "run"
    short = ["--max-steps", "1"]
    assert main(finetune_argv(tiny_base, train, out, *short)) == 0
    capsys.readouterr()
    first = {path.name: path.read_bytes() for path in out.iterdir()}
    assert "metrics.json" in first and "model.safetensors" in first

    assert main(finetune_argv(tiny_base, train, out, *short, "--seed", "5")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --out {out} already holds ")
    assert "config.json" in err[0] and "--overwrite" in err[0]
    assert {path.name: path.read_bytes() for path in out.iterdir()} == first

    assert main(finetune_argv(tiny_base, train, out, *short, "--seed", "5", "--overwrite")) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["seed"] == 5
    assert (out / "model.safetensors").read_bytes() != first["model.safetensors"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(finetune_argv(tiny_base, train, empty, *short)) == 0
    capsys.readouterr()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert main(finetune_argv(tiny_base, train, a_file, *short, "--overwrite")) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
