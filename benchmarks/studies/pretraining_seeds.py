"""How much of what pre-training adds is the fine-tuning seed: the pre-training rows of benchmarks.accuracy
(sst2-pretrained-here / sst2-random-init, the product's SST-2 recipe, seed 42) fine-tuned again under other seeds.

Scores are fine-tuning's own evaluation of SST-2 dev (the served value equals it within 0.12 points on every
accuracy row). Writes benchmarks/results/pretraining_seeds.{json,md}; finished runs are reused.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from dataclasses import replace
from typing import Any

from benchmarks import accuracy

DEFAULT_SEED = 42  # training finetune's default: the seed of the accuracy rows
ROWS = ("sst2-pretrained-here", "sst2-random-init", "sst2-pretrained-here-4k", "sst2-random-init-4k")
RESULTS = accuracy.RESULTS.parent / "pretraining_seeds"

log = logging.getLogger(__name__)


def seeded(name: str, seed: int) -> accuracy.AccuracyRecipe:
    recipe = accuracy.RECIPES[name]
    if seed == DEFAULT_SEED:
        return recipe
    return replace(recipe, name=f"{name}-seed{seed}", arguments=(*recipe.arguments, "--seed", str(seed)))


def dev_accuracy(name: str, seed: int) -> dict[str, Any]:
    record = accuracy.train(seeded(name, seed))
    return {
        "row": name, "seed": seed, "accuracy": round(100 * record["metrics"]["best"]["accuracy"], 2),
        "wall_s": record["wall_s"], "load_avg": [record["load_avg_start"], record["load_avg_end"]],
    }  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per subset: pre-trained and random accuracy by seed, and the difference's mean, min and max."""
    by_row: dict[str, dict[int, float]] = {}
    for run in runs:
        by_row.setdefault(run["row"], {})[run["seed"]] = run["accuracy"]
    lines = []
    for subset in ("", "-4k"):
        pretrained, random = (
            by_row.get(f"sst2-pretrained-here{subset}", {}),
            by_row.get(f"sst2-random-init{subset}", {}),
        )
        seeds = sorted(set(pretrained) & set(random))
        if not seeds:
            continue
        differences = [pretrained[seed] - random[seed] for seed in seeds]
        lines.append({
            "subset": "first 4,000" if subset else "all", "seeds": seeds, "pretrained": [pretrained[s] for s in seeds],
            "random": [random[s] for s in seeds], "differences": [round(d, 2) for d in differences],
            "mean_difference": round(statistics.fmean(differences), 2),
            "min_difference": round(min(differences), 2), "max_difference": round(max(differences), 2),
        })  # fmt: skip
    return lines


def markdown(runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:
    loads = [run["load_avg"] for run in runs]
    lines = [
        "# Does pre-training help, over fine-tuning seeds?",
        "",
        "`python -m benchmarks.studies.pretraining_seeds`: the product's SST-2 recipe from the encoder pre-trained "
        'here and from its random twin (`benchmarks/results/accuracy.md`, "Does pre-training help?"), under seeds '
        f"{', '.join(str(s) for s in rows[0]['seeds'])} ({DEFAULT_SEED}: the accuracy rows). SST-2 dev accuracy is "
        "fine-tuning's own evaluation; runs one at a time, nothing else on the machine "
        f"(load average at the first start {loads[0][0]}, at the last end {loads[-1][1]}).",
        "",
        "| SST-2 train sentences | pre-trained here, by seed | random weights, by seed | difference by seed | "
        "mean difference (target +3) |",
        "| --- | --- | --- | --- | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['subset']} | {' / '.join(f'{v:.2f}' for v in row['pretrained'])} | "
            f"{' / '.join(f'{v:.2f}' for v in row['random'])} | "
            f"{' / '.join(f'{v:+.2f}' for v in row['differences'])} | **{row['mean_difference']:+.2f}** |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.pretraining_seeds", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seed", type=int, action="append", help=f"seeds (default: {DEFAULT_SEED}, 1, 2)")
    parser.add_argument("--row", action="append", choices=ROWS, help="rows (default: all four)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    runs = [dev_accuracy(name, seed) for seed in args.seed or (DEFAULT_SEED, 1, 2) for name in args.row or ROWS]
    rows = summary(runs)
    RESULTS.with_suffix(".json").write_text(json.dumps({"runs": runs, "summary": rows}, indent=2) + "\n")
    RESULTS.with_suffix(".md").write_text(markdown(runs, rows))
    for row in rows:
        log.info("%s: mean difference %+.2f (%s)", row["subset"], row["mean_difference"], row["differences"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
