"""LoRA against full fine-tuning: speed and peak memory of ``python -m training finetune`` on BERT-base and BERT-large.

Speed and memory do not depend on the weights' values, so each size is a random checkpoint
(``benchmarks.random_bert``) with a sequence-classification head. Each run is its own ``python -m training
finetune`` process on the SST-2 dev sentences (only data shape matters here), ``--max-steps`` optimiser steps at
``--batch-size`` x ``--max-length`` tokens, no evaluation: seconds per step from the run's own ``wall_seconds``
(its training loop, model loading aside), peak RSS from ``os.wait4`` of that one child, trainable parameters from
its log. LoRA: ``--lora-rank 8`` on the family's default targets (query and value), the head trained as well.

    BERTSERVE_EVAL_DATA=/work/shared/data python -m benchmarks.lora_training --out benchmarks/results/lora_training
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR, shared_data_dir
from benchmarks.random_bert import ensure_checkpoint, run_measured
from benchmarks.report import load_average, page, table, write_report

log = logging.getLogger("benchmarks.lora_training")
SCRATCH = SCRATCH_DIR / "lora-training"
MODES = {"full": [], "lora": ["--lora-rank", "8"]}
TRAINABLE = re.compile(r"([\d,]+) of ([\d,]+) parameters train")


def finetune(checkpoint: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    out = SCRATCH / "runs" / f"{checkpoint.name}-{mode}"
    command = [
        sys.executable, "-m", "training", "finetune", "--task", "text-classification", "--base", str(checkpoint),
        "--train", str(shared_data_dir() / "sst2" / "dev.tsv"), "--out", str(out), "--overwrite",
        "--max-steps", str(args.steps), "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
        "--precision", "fp32", "--seed", "0", *MODES[mode],
    ]  # fmt: skip
    log_path = SCRATCH / "logs" / f"{checkpoint.name}-{mode}.log"
    wall_s, peak_rss_bytes, returncode = run_measured(command, log_path)
    if returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({returncode}): see {log_path}")
    report = json.loads((out / "metrics.json").read_text())
    found = TRAINABLE.search(log_path.read_text(errors="replace"))
    trainable = int(found.group(1).replace(",", "")) if found else None
    return {
        "size": checkpoint.name, "mode": mode, "steps": args.steps,
        "process_wall_s": round(wall_s, 1),
        "train_wall_s": report["wall_seconds"], "s_per_step": round(report["wall_seconds"] / args.steps, 3),
        "peak_rss_mb": round(peak_rss_bytes / 2**20), "trainable_parameters": trainable,
    }  # fmt: skip


def markdown(figures: dict[str, Any]) -> str:
    rows, by_key = [], {(run["size"], run["mode"]): run for run in figures["runs"]}
    for run in figures["runs"]:
        full = by_key.get((run["size"], "full"))
        speed = f"{full['s_per_step'] / run['s_per_step']:.2f}x" if full else "-"
        memory = f"{run['peak_rss_mb'] / full['peak_rss_mb']:.2f}x" if full else "-"
        trainable = f"{run['trainable_parameters']:,}" if run["trainable_parameters"] else "all"
        rows.append(
            [run["size"], run["mode"], trainable, f"{run['s_per_step']:.2f}", speed, run["peak_rss_mb"], memory]
        )
    columns = ["BERT", "fine-tuning", "trainable parameters", "s / step:", "speed vs full:", "peak RSS MB:",
               "memory vs full:"]  # fmt: skip
    settings = figures["settings"]
    intro = (
        f"`{figures['command']}` on tree {figures['tree']}; 2 cores, load average at start "
        f"{figures['load_avg']['start']}, at end {figures['load_avg']['end']}. Random-weight checkpoints, one "
        f"`python -m training finetune` process per row: {settings['steps']} steps of {settings['batch_size']} x "
        f"{settings['max_length']} tokens, fp32, no "
        "evaluation; s / step from the run's own training wall time; peak RSS of the process (`os.wait4`)."
    )
    return page("LoRA against full fine-tuning: speed and memory", intro, table(columns, rows)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lora_training", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="base,large")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    at_start = os.getloadavg()
    runs = []
    for size in args.sizes.split(","):
        checkpoint = SCRATCH / size
        ensure_checkpoint(checkpoint, size, log_dir=SCRATCH / "logs")
        for mode in MODES:
            runs.append(finetune(checkpoint, mode, args))
            log.info("%s", runs[-1])
    from benchmarks.ab import revision

    figures = {
        "command": "python -m benchmarks.lora_training " + " ".join(sys.argv[1:] if argv is None else argv),
        "tree": revision(REPO_ROOT), "settings": {"steps": args.steps, "batch_size": args.batch_size,
        "max_length": args.max_length}, "runs": runs, "load_avg": load_average(at_start),
    }  # fmt: skip
    write_report(args.out, figures, markdown(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
