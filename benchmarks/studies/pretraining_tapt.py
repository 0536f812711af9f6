"""Task-adaptive pre-training (Gururangan et al. 2020, "Don't Stop Pretraining"): MLM on SST-2's own training
sentences, without their labels, between pre-training and fine-tuning.

    python -m benchmarks.studies.pretraining_tapt

For each start, the encoder pre-trained here on WikiText (benchmarks.pretraining) and random weights of its shape,
tokenizer and seed: continued MLM on the SST-2 train sentences (`training finetune --task fill-mask`,
benchmarks.pretraining's TAPT_ARGUMENTS, TAPT_EPOCHS epochs: the pass the accuracy rows -tapt fine-tune from), then
the product's SST-2 recipe (the sst2 row's) from that checkpoint. Set beside the accuracy rows sst2-pretrained-here
and sst2-random-init, which skip the middle step. The MLM checkpoint has no pooler (BERT's pooler is trained by NSP),
so the classifier's pooler starts from random weights on both sides. Scores are fine-tuning's own evaluation of
SST-2 dev. Writes benchmarks/results/pretraining_tapt.{json,md} (-eN with --mlm-epochs N); finished runs are reused.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from typing import Any

from benchmarks import accuracy
from benchmarks.datasets import shared_data_dir
from benchmarks.pretraining import (
    STARTS,
    TAPT_ARGUMENTS,
    TAPT_EPOCHS,
    epochs_suffix,
    finetune,
    mlm_folder,
    mlm_step,
)
from benchmarks.studies import pretraining_seeds

DEFAULT_SEED = pretraining_seeds.DEFAULT_SEED
RESULTS = accuracy.RESULTS.parent / "pretraining_tapt"

log = logging.getLogger(__name__)


def mlm_epochs_option(epochs: int) -> str:
    return "" if epochs == TAPT_EPOCHS else f" --mlm-epochs {epochs}"


def run_start(start: str, seeds: list[int], epochs: int = TAPT_EPOCHS) -> list[dict[str, Any]]:
    """One MLM step on SST-2's sentences from ``start``, then the SST-2 recipe from it under each seed."""
    mlm = mlm_step(start, epochs)
    data = shared_data_dir() / "sst2"
    runs = []
    for seed in seeds:
        suffix, seed_arguments = ("", []) if seed == DEFAULT_SEED else (f"-seed{seed}", ["--seed", str(seed)])
        sst2 = finetune(f"sst2-{start}{epochs_suffix(epochs)}{suffix}", [
            "--task", "text-classification", "--base", str(mlm_folder(start, epochs)),
            "--train", str(data / "train.tsv"), "--eval", str(data / "dev.tsv"), *accuracy.SST2_ARGUMENTS,
            *seed_arguments,
        ])  # fmt: skip
        runs.append({
            "start": start, "seed": seed, "mlm_epochs": epochs,
            "sst2_accuracy": round(100 * sst2["best"]["accuracy"], 2),
            "mlm_top1_heldout_wikitext": round(100 * mlm["best"].get("mlm_top1_accuracy", 0.0), 2),
            "mlm": {k: mlm[k] for k in ("wall_s", "load_avg")}, "sst2": {k: sst2[k] for k in ("wall_s", "load_avg")},
        })  # fmt: skip
    return runs


def without_tapt() -> dict[str, dict[int, float]]:
    """SST-2 dev accuracy fine-tuned straight from each start, by seed (benchmarks.studies.pretraining_seeds' runs)."""
    runs = json.loads(pretraining_seeds.RESULTS.with_suffix(".json").read_text())["runs"]
    direct: dict[str, dict[int, float]] = {}
    for run in runs:
        for start in STARTS:
            if run["row"] == f"sst2-{start}":
                direct.setdefault(start, {})[run["seed"]] = run["accuracy"]
    return direct


def wall_and_load(record: dict[str, Any]) -> str:
    return f"{record['wall_s'] / 60:.1f} min / {record['load_avg'][0]} ; {record['load_avg'][1]}"


def by_seed(values: dict[int, float], seeds: list[int]) -> str:
    return " / ".join(f"{values[seed]:.2f}" if seed in values else "-" for seed in seeds)


def markdown(runs: list[dict[str, Any]], direct: dict[str, dict[int, float]], epochs: int = TAPT_EPOCHS) -> str:
    seeds = sorted({run["seed"] for run in runs}, key=lambda seed: (seed != DEFAULT_SEED, seed))
    after: dict[str, dict[int, float]] = {}
    for run in runs:
        after.setdefault(run["start"], {})[run["seed"]] = run["sst2_accuracy"]
    random = direct.get("random-init", {})
    lines = [
        "# Task-adaptive pre-training: MLM on SST-2's sentences before fine-tuning",
        "",
        f"`python -m benchmarks.studies.pretraining_tapt{mlm_epochs_option(epochs)}` (docstring: what it runs). "
        "Continued MLM: "
        f"`training finetune --task fill-mask --epochs {epochs} {' '.join(TAPT_ARGUMENTS)}` on SST-2 train's 67,349 "
        "sentences without labels; "
        f"then the product's SST-2 recipe under seeds {' / '.join(str(seed) for seed in seeds)}. SST-2 dev "
        "accuracy: fine-tuning's own evaluation (the served rows agree with it); fine-tuned directly: "
        "`pretraining_seeds.json`. One run at a time, nothing else on the machine.",
        "",
        "| start | SST-2 dev, fine-tuned directly | SST-2 dev, after MLM on SST-2 sentences | mean difference vs "
        "random weights fine-tuned directly (target +3) |",
        "| --- | --- | --- | ---: |",
    ]
    for start, values in after.items():
        shared = [seed for seed in values if seed in random]
        gain = statistics.fmean(values[seed] - random[seed] for seed in shared) if shared else float("nan")
        lines.append(
            f"| {start} | {by_seed(direct.get(start, {}), seeds)} | **{by_seed(values, seeds)}** | **{gain:+.2f}** |"
        )
    lines += [
        "",
        "| run | held-out WikiText MLM top-1 after the MLM step | MLM step: wall / load start ; end | "
        "fine-tune: wall / load start ; end |",
        "| --- | ---: | --- | --- |",
        *(
            f"| {run['start']}, seed {run['seed']} | {run['mlm_top1_heldout_wikitext']:.2f} | "
            f"{wall_and_load(run['mlm'])} | {wall_and_load(run['sst2'])} |"
            for run in runs
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.pretraining_tapt", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--start", action="append", choices=list(STARTS), help="starts (default: both)")
    parser.add_argument("--seed", type=int, action="append", help=f"fine-tuning seeds (default: {DEFAULT_SEED})")
    parser.add_argument("--mlm-epochs", type=int, default=TAPT_EPOCHS, help="passes of the MLM step (results -eN)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    seeds = args.seed or [DEFAULT_SEED]
    runs = [run for start in args.start or STARTS for run in run_start(start, seeds, args.mlm_epochs)]
    direct = without_tapt()
    results = RESULTS.with_name(RESULTS.name + epochs_suffix(args.mlm_epochs))
    results.with_suffix(".json").write_text(json.dumps({"runs": runs, "without_tapt": direct}, indent=2) + "\n")
    results.with_suffix(".md").write_text(markdown(runs, direct, args.mlm_epochs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
