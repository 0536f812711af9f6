"""The encoders the accuracy rows sst2-pretrained-here / sst2-random-init (and their -tapt twins) start from.

Pre-training that helps, shown: a small BERT pre-trained here from scratch on WikiText-2 (MLM + NSP), and the same
SST-2 recipe from it and from random weights of the same shape (accuracy.RECIPES sst2-pretrained-here and
sst2-random-init). This module runs the pre-training once and scores MLM and NSP on the held-out paragraphs. It
also runs the task-adaptive MLM pass over SST-2's training sentences (no labels) that the -tapt rows fine-tune
from; the study ``benchmarks.studies.pretraining_tapt`` runs that pass under more seeds and reports it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.datasets import REPO_ROOT, read_sst2
from benchmarks.derived_data import GENERATED_DATA, write_if_changed
from benchmarks.servers import OFFLINE_ENV
from benchmarks.training_runs import RUNS as ACCURACY_RUNS
from benchmarks.training_runs import load_average

log = logging.getLogger(__name__)

RUNS = REPO_ROOT / "runs" / "pretraining"
PRETRAINED = RUNS / "pretrained"
RECORD = RUNS / "pretrain.train.json"
# 5.5M parameters (4 x 256, vocabulary 8,000 trained on the corpus), 6,500 steps of 32: about 35 passes over the
# 5,800 sentence pairs, so the pairs are drawn 35 times (--dupe-factor), each draw with fresh random next sentences:
# with one draw the NSP labels were memorised (held-out NSP 52 %). 52 minutes on two cores with the full-vocabulary
# MLM head (the head at masked positions only now takes 0.64 of the time a step). 11,000 steps at 1e-3 (chosen on a
# GPU by held-out MLM, benchmarks.studies.pretraining_sweep; 56.6 minutes) learnt more English but helped SST-2 less:
# training/RESULTS.md.
PRETRAIN_ARGUMENTS = (
    "--vocab-size", "8000", "--layers", "4", "--hidden", "256", "--heads", "4", "--intermediate", "1024",
    "--max-length", "128", "--steps", "6500", "--batch-size", "32", "--lr", "5e-4", "--warmup-ratio", "0.05",
    "--eval-every", "500", "--group-by-length", "--dupe-factor", "35", "--seed", "0",
)  # fmt: skip
MAX_LENGTH = "128"

# Task-adaptive pre-training (Gururangan et al. 2020): continued MLM on SST-2 train's sentences from each start.
TAPT_EPOCHS = 1  # the -tapt rows' MLM pass; the study's --mlm-epochs tries others
TAPT_ARGUMENTS = (
    "--lr", "2e-4", "--warmup-ratio", "0.06", "--max-length", "64", "--batch-size", "32", "--group-by-length",
)  # fmt: skip
STARTS = {"pretrained-here": (), "random-init": ("--random-init",)}
TAPT_RUNS = ACCURACY_RUNS / "tapt"


def wikitext_files() -> tuple[Path, Path]:
    from benchmarks.derived_data import wikitext_split

    folder = wikitext_split()
    return folder / "wikitext-train.txt", folder / "wikitext-heldout.txt"


def public_pretrain_command() -> str:
    return (
        "python -m training pretrain --corpus runs/accuracy/data/wikitext-train.txt --out runs/pretraining/pretrained "
        + " ".join(PRETRAIN_ARGUMENTS)
    )


def pretrained_here() -> Path:
    """The pre-trained checkpoint, trained now unless a finished run is there (its record beside it)."""
    finished = (PRETRAINED / "metrics.json").is_file() and RECORD.is_file()
    if not finished:
        corpus, _ = wikitext_files()
        command = [
            sys.executable, "-m", "training", "pretrain", "--corpus", str(corpus), "--out", str(PRETRAINED),
            *PRETRAIN_ARGUMENTS,
        ]  # fmt: skip
        log.info("[pretraining] %s", " ".join(command))
        RUNS.mkdir(parents=True, exist_ok=True)
        started, load_start = time.time(), load_average()
        status = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}).returncode
        if status != 0:
            raise SystemExit(f"pre-training failed with exit code {status}")
        RECORD.write_text(
            json.dumps({
                "wall_s": round(time.time() - started), "load_avg_start": load_start, "load_avg_end": load_average(),
                "args": " ".join(PRETRAIN_ARGUMENTS),
            }) + "\n"
        )  # fmt: skip
    return PRETRAINED


def heldout_scores(random_init: bool) -> dict[str, float]:
    """MLM and NSP on the held-out WikiText paragraphs, of the pre-trained weights or of random ones."""
    _, heldout = wikitext_files()
    command = [
        sys.executable, "-m", "training", "pretrain-eval", "--checkpoint", str(pretrained_here()),
        "--corpus", str(heldout), "--max-length", MAX_LENGTH, *(["--random-init"] if random_init else []),
    ]  # fmt: skip
    completed = subprocess.run(
        command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}, check=True, capture_output=True, text=True
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def pretraining_record(random_init: bool, tapt: bool = False) -> dict[str, Any]:
    """What a row of sst2-pretrained-here / sst2-random-init carries about the encoder it started from; ``tapt``:
    that encoder then had an MLM pass over SST-2's sentences (its held-out scores are from before it)."""
    record = json.loads(RECORD.read_text())
    best = json.loads((PRETRAINED / "metrics.json").read_text()).get("best") or {}
    return {
        "init": ("random" if random_init else "pretrained here") + (" + MLM on SST-2 sentences" if tapt else ""),
        "pretrain_command": public_pretrain_command(),
        "pretrain_wall_s": record["wall_s"],
        "pretrain_load_avg": {"start": record["load_avg_start"], "end": record["load_avg_end"]},
        "pretrain_best_step": best.get("step"),
        "wikitext_heldout": heldout_scores(random_init),
    }


def sst2_sentences() -> Path:
    """SST-2 train's sentences, one a line, labels dropped: the text a task-adaptive MLM step reads."""
    path = GENERATED_DATA / "sst2-train-sentences.txt"
    GENERATED_DATA.mkdir(parents=True, exist_ok=True)
    write_if_changed(path, [row.text for row in read_sst2("train")])
    return path


def finetune(name: str, arguments: list[str]) -> dict[str, Any]:
    """``training finetune`` into TAPT_RUNS/name unless it finished there; returns its record and best metrics."""
    out, record_path = TAPT_RUNS / name, TAPT_RUNS / f"{name}.train.json"
    if not ((out / "metrics.json").is_file() and record_path.is_file()):
        command = [sys.executable, "-m", "training", "finetune", "--out", str(out), "--overwrite", *arguments]
        log.info("[%s] %s", name, " ".join(command))
        TAPT_RUNS.mkdir(parents=True, exist_ok=True)
        started, load_start = time.time(), load_average()
        status = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}).returncode
        if status != 0:
            raise SystemExit(f"{name} failed with exit code {status}")
        record = {"wall_s": round(time.time() - started), "load_avg": [load_start, load_average()]}
        record_path.write_text(json.dumps(record) + "\n")
    record = json.loads(record_path.read_text())
    return {**record, "best": json.loads((out / "metrics.json").read_text()).get("best") or {}}


def epochs_suffix(epochs: int) -> str:
    return "" if epochs == TAPT_EPOCHS else f"-e{epochs}"


def mlm_folder(start: str, epochs: int = TAPT_EPOCHS) -> Path:
    return TAPT_RUNS / f"mlm-{start}{epochs_suffix(epochs)}"


def mlm_step(start: str, epochs: int = TAPT_EPOCHS) -> dict[str, Any]:
    """The MLM pass over SST-2's sentences from ``start`` (run unless finished): its record and best metrics."""
    _, heldout = wikitext_files()
    return finetune(mlm_folder(start, epochs).name, [
        "--task", "fill-mask", "--base", str(pretrained_here()), "--train", str(sst2_sentences()),
        "--eval", str(heldout), "--epochs", str(epochs), *TAPT_ARGUMENTS, *STARTS[start],
    ])  # fmt: skip


def mlm_checkpoint(start: str) -> Path:
    """``start``'s encoder after the MLM pass: what benchmarks.accuracy's -tapt rows fine-tune."""
    mlm_step(start)
    return mlm_folder(start)
