"""benchmarks.accuracy's static int8 exports: calibration rows drawn from the training split, in the export's format,
and an export re-done when its arguments change."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import accuracy
from benchmarks.datasets import DataDirNotFound, read_sst2, shared_data_dir
from model_export.task_eval import read_eval_rows

try:
    shared_data_dir()
except DataDirNotFound:
    pytest.skip("the shared data folder is not here", allow_module_level=True)


@pytest.fixture
def generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(accuracy, "GENERATED_DATA", tmp_path / "data")
    return tmp_path / "data"


def test_calibration_rows_are_training_rows_the_export_reads(generated: Path) -> None:
    recipe = accuracy.RECIPES["sst2"]
    path = accuracy.calibration_file(recipe)
    rows = read_eval_rows(path, "text-classification", {0: "0", 1: "1"})
    assert len(rows) == accuracy.CALIBRATION_ROWS and path.parent == generated
    train = {(row.text, row.label) for row in read_sst2("train")}
    assert all((row["text"], row["label"]) in train for row in rows)
    assert len({row["text"] for row in rows}) == len(rows)
    assert accuracy.calibration_file(recipe).read_text() == path.read_text()  # the same draw every time


def test_question_answering_calibrates_on_training_articles_only(generated: Path) -> None:
    from benchmarks.datasets import read_squad

    rows = read_eval_rows(accuracy.calibration_file(accuracy.RECIPES["squad"]), "question-answering")
    held_out = {example.question for example in read_squad(16)}
    assert not {row["question"] for row in rows} & held_out


def test_a_static_recipe_exports_int8_with_its_calibration_file(generated: Path, monkeypatch) -> None:
    monkeypatch.setattr(accuracy, "GENERATED_DATA", accuracy.REPO_ROOT / "runs" / "accuracy" / "data")
    recipe = replace(accuracy.RECIPES["sst2"], static_int8=True)
    arguments = accuracy.export_arguments(recipe, "int8")
    calibration = arguments[arguments.index("--int8-calibration") + 1]
    assert not Path(calibration).is_absolute() and (accuracy.REPO_ROOT / calibration).is_file()
    assert "--int8-calibration" not in accuracy.export_arguments(recipe, "fp32")
    assert json.dumps(arguments) != json.dumps(accuracy.export_arguments(replace(recipe, static_int8=False), "int8"))
