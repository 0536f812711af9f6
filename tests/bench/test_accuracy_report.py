"""benchmarks.accuracy_report's pre-training section: what pre-training adds, pre-trained minus random, per recipe."""

from __future__ import annotations

from typing import Any

from benchmarks import accuracy
from benchmarks.accuracy_report import pretraining_differences, table


def row(task: str, precision: str, value: float) -> dict[str, Any]:
    return {"task": task, "precision": precision, "value": value}


def test_pretraining_rows_share_the_product_sst2_recipe() -> None:
    product = accuracy.RECIPES["sst2"].arguments
    assert accuracy.RECIPES["sst2-pretrained-here"].arguments == product
    assert accuracy.RECIPES["sst2-random-init"].arguments == product
    assert accuracy.RECIPES["sst2-random-init-4k"].arguments == (*product, "--max-train-samples", "4000")
    assert accuracy.RECIPES["sst2-random-init-lr1e-4"].arguments != product


def test_differences_pair_each_variant_fp32_only() -> None:
    rows = [
        row("sst2", "fp32", 90.6),
        row("sst2-pretrained-here", "fp32", 81.0),
        row("sst2-pretrained-here", "int8", 70.0),
        row("sst2-random-init", "fp32", 77.5),
        row("sst2-pretrained-here-4k-lr1e-4", "fp32", 69.15),
        row("sst2-random-init-4k-lr1e-4", "fp32", 70.76),
        row("sst2-pretrained-here-lr1e-4", "fp32", 80.5),
    ]
    lines = pretraining_differences(rows)
    body = lines[2:]
    assert body == [
        "| (all, product recipe) | 81.00 | 77.50 | +3.50 |",
        "| -4k-lr1e-4 | 69.15 | 70.76 | -1.61 |",
    ]


def test_seed_summary_pairs_runs_by_seed() -> None:
    from benchmarks.studies.pretraining_seeds import seeded, summary

    runs = [
        {"row": "sst2-pretrained-here", "seed": 42, "accuracy": 80.0},
        {"row": "sst2-random-init", "seed": 42, "accuracy": 77.0},
        {"row": "sst2-pretrained-here", "seed": 1, "accuracy": 81.0},
        {"row": "sst2-random-init", "seed": 1, "accuracy": 79.5},
        {"row": "sst2-pretrained-here", "seed": 2, "accuracy": 82.0},
        {"row": "sst2-pretrained-here-4k", "seed": 1, "accuracy": 60.0},
    ]
    (all_sentences,) = summary(runs)
    assert all_sentences["seeds"] == [1, 42]
    assert all_sentences["differences"] == [1.5, 3.0]
    assert all_sentences["mean_difference"] == 2.25
    assert seeded("sst2-random-init", 42) is accuracy.RECIPES["sst2-random-init"]
    other = seeded("sst2-random-init", 1)
    assert other.name == "sst2-random-init-seed1" and other.arguments[-2:] == ("--seed", "1")


def test_cpu_reproduction_shares_its_recipe_and_variants_share_their_scale() -> None:
    reproduction = accuracy.RECIPES["sst2-cpu"]
    assert reproduction.arguments == accuracy.RECIPES["sst2"].arguments
    assert reproduction.score_as == "sst2"
    assert reproduction.int8_arguments == accuracy.RECIPES["sst2"].int8_arguments
    squad = {
        **row("squad-cpu", "fp32", 70.1), "metric": "f1", "target": 72.0, "wall_s": 60,
        "trained_best": {"f1": 70.01, "exact_match": 57.19, "epoch": 5.0},
    }  # fmt: skip
    sst2 = {**squad, "task": "sst2-cpu", "trained_best": {"accuracy": 0.906, "epoch": 3.0}}
    assert "f1 70.01, exact_match 57.19 (epoch 5.0)" in table([squad])[2]
    assert "accuracy 90.60 (epoch 3.0)" in table([sst2])[2]
