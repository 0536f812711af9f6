from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.studies.pretraining_sweep import BATCH, CONFIGURATIONS, PAIRS_PER_DRAW, Pretraining, summary

Accuracies = dict[int, float | None]


def runs(accuracies: Accuracies, random_init: bool) -> list[dict[str, Any]]:
    return [{"seed": seed, "accuracy": value, "random_init": random_init} for seed, value in accuracies.items()]


def chain(name: str, shape: str, pretrained: Accuracies, random: Accuracies) -> dict[str, Any]:
    return {
        "name": name, "shape": shape, "mlm_top1": 0.5, "nsp": 0.8,
        "finetunes": runs(pretrained, False), "random": runs(random, True),
    }  # fmt: skip


def test_each_configuration_is_compared_with_its_own_shapes_twin_over_the_seeds_both_finished() -> None:
    chains = [
        chain("a", "l4", {42: 80.0, 1: 81.0, 2: 79.0}, {42: 77.0, 1: 78.0, 2: None}),
        chain("b", "l4", {42: 83.0, 1: None, 2: 82.0}, {}),
        chain("c", "l6", {42: 70.0}, {42: 71.5}),
        chain("d", "l8", {42: 75.0}, {}),
    ]
    rows = {row["name"]: row for row in summary(chains)}
    assert rows["a"]["seeds"] == [1, 42] and rows["a"]["mean_difference"] == pytest.approx(3.0)
    assert rows["b"]["seeds"] == [42] and rows["b"]["random"] == [77.0] and rows["b"]["mean_difference"] == 6.0
    assert rows["c"]["mean_difference"] == -1.5
    assert rows["d"]["seeds"] == [] and rows["d"]["mean_difference"] is None


@pytest.mark.parametrize("config", CONFIGURATIONS, ids=lambda c: c.name)
def test_every_configuration_draws_enough_pairs_for_its_steps(config: Pretraining) -> None:
    command = config.command(Path("corpus.txt"), Path("out"))
    draws = int(command[command.index("--dupe-factor") + 1])
    assert draws * PAIRS_PER_DRAW >= config.steps * BATCH  # each step's pairs from a fresh draw
    assert command[command.index("--steps") + 1] == str(config.steps)
    assert command[command.index("--out") + 1] == str(Path("out") / config.name)
