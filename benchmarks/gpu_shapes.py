"""What a batch of a shape never run before costs on the service's own session (issue 44's GPU gap).

On the H200 (``benchmarks/results/gpu.md``) MiniLM SST-2's served batches took 53-61 ms inside the model at c>=32
(11-97 rows) where the raw loop runs 8-256 rows in 1-4 ms, while BERT-base on fixed-length inputs lost far less
(6-13 ms). The raw loop sweeps the same sorted shapes again and again, and its first pass is a warm-up; served
batches of SST-2 sentences bring ever new (rows, tokens) shapes. This study runs the service's ``OrtRunner`` (its
session options and IOBinding, one intra-op thread as tuning picks on a GPU) on batches as a server forms them
(random rows of SST-2 dev, 1 to ``--max-rows`` of them): a batch of a shape not seen before is run twice, and its
first call against its second is what a new shape costs; batches of shapes seen before are timed once. Two
variants: the batch as padded (``exact``), and padded up to the service's buckets (``buckets``: rows and tokens each
rounded up to 1, 2, 3, 4, 6, 8, 12, ..., tokens at least 16: ``service.shape_buckets``, on a GPU by default). Each
runs in its own process, once as CUDA loads kernels by default (lazily, on first use) and once with
``CUDA_MODULE_LOADING=EAGER``; each prints one JSON line. On a CPU a new shape costs nothing extra (the smoke).

    python -m benchmarks.gpu_shapes --bundle /tmp/gpu/sst2-fp16 --device cuda --out /tmp/gpu/report/gpu-shapes
    python -m benchmarks.gpu_shapes --bundle benchmarks/scratch/sst2-fp32 --device cpu --calls 200   # smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("benchmarks.gpu_shapes")
MODULE_LOADING = ("default", "EAGER")


def summary(seconds: list[float]) -> dict[str, Any]:
    if not seconds:
        return {"calls": 0}
    ordered = sorted(seconds)
    return {
        "calls": len(seconds), "total_s": round(sum(seconds), 3),
        "median_ms": round(1000 * statistics.median(seconds), 3), "mean_ms": round(1000 * statistics.mean(seconds), 3),
        "p90_ms": round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 3),
    }  # fmt: skip


def one_variant(args: argparse.Namespace) -> dict[str, Any]:
    """In this process: the service's runner on ``args.calls`` served-like batches; first-seen against repeated."""
    import onnx

    from benchmarks import raw_ort
    from benchmarks.datasets import read_sst2
    from contract.onnx_io import PaddedRows
    from service.device import CPU, Device
    from service.sessions import OrtRunner
    from service.shape_buckets import ShapeBuckets

    graph = onnx.load(str(args.bundle / "model.onnx"), load_external_data=False).graph
    outputs = tuple(output.name for output in graph.output)
    device = Device("cuda", 0) if args.device == "cuda" else CPU
    runner = OrtRunner(args.bundle / "model.onnx", outputs, intra_op_threads=1, device=device)
    tokenizer = raw_ort.bundle_tokenizer(args.bundle, "text-classification")
    texts = [row.text for row in read_sst2("dev")]
    encodings = tokenizer.tokenizer.encode_batch(texts)
    buckets = ShapeBuckets(tokenizer.pad_id, tokenizer.max_length)
    rng = random.Random(args.seed)
    runner.run(raw_ort.pad_rows([(e.ids, e.type_ids) for e in encodings[:8]], tokenizer.pad_id))
    seen: set[tuple[int, ...]] = set()
    first: list[float] = []
    repeat: list[float] = []
    again: list[float] = []
    started = time.perf_counter()
    for _ in range(args.calls):
        chosen = rng.sample(encodings, rng.randint(1, args.max_rows))
        batch = raw_ort.pad_rows([(e.ids, e.type_ids) for e in chosen], tokenizer.pad_id)
        if args.variant == "buckets":
            batch = PaddedRows(buckets.pad(batch.feeds), batch.lengths)
        shape = tuple(batch.input_ids.shape)
        began = time.perf_counter()
        runner.run(batch)
        took = time.perf_counter() - began
        if shape in seen:
            again.append(took)
            continue
        seen.add(shape)
        began = time.perf_counter()
        runner.run(batch)  # the same batch once more: what the shape's first call cost beyond a warm one
        first.append(took)
        repeat.append(time.perf_counter() - began)
    return {
        "variant": args.variant, "module_loading": os.environ.get("CUDA_MODULE_LOADING", "default"),
        "device": device.name, "shapes": len(seen), "wall_s": round(time.perf_counter() - started, 3),
        "first_seen": summary(first), "same_batch_again": summary(repeat), "seen_before": summary(again),
        "first_call_extra_s": round(sum(first) - sum(repeat), 3),
    }  # fmt: skip


def run_variant(args: argparse.Namespace, variant: str, loading: str) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("CUDA_MODULE_LOADING", None)
    if loading != "default":
        env["CUDA_MODULE_LOADING"] = loading
    command = [sys.executable, "-m", "benchmarks.gpu_shapes", "--one", "--variant", variant,
               "--bundle", str(args.bundle), "--device", args.device, "--calls", str(args.calls),
               "--max-rows", str(args.max_rows), "--seed", str(args.seed)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        return {"variant": variant, "module_loading": loading, "error": done.stderr[-1500:]}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# First-seen batch shapes on the service's session (benchmarks.gpu_shapes)",
        "",
        f"Bundle `{results['bundle']}`, {results['calls']} batches of 1-{results['max_rows']} random SST-2 dev rows, "
        f"device {results['device']}. Load average at start {results['load_avg']['start']}, at end "
        f"{results['load_avg']['end']}.",
        "",
        "Each cell: calls, median / mean / p90 ms (total s). A new shape's batch runs twice: its first call, then the "
        "same batch again; the extra is the first calls' total less the second calls'.",
        "",
        "| variant | CUDA module loading | shapes | new shape, first call | the same batch again | extra s | "
        "shapes seen before |",
        "| --- | --- | ---: | --- | --- | ---: | --- |",
    ]
    for row in results["variants"]:
        if "error" in row:
            lines.append(f"| {row['variant']} | {row['module_loading']} | - | error | {row['error'][-120:]!r} | | |")
            continue
        cells = [
            f"{part['calls']}: {part['median_ms']} / {part['mean_ms']} / {part['p90_ms']} ({part['total_s']})"
            if part["calls"] else "none"
            for part in (row["first_seen"], row["same_batch_again"], row["seen_before"])
        ]  # fmt: skip
        lines.append(f"| {row['variant']} | {row['module_loading']} | {row['shapes']} | {cells[0]} | {cells[1]} | "
                     f"{row['first_call_extra_s']} | {cells[2]} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_shapes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a text-classification bundle (fp16 on a GPU)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--max-rows", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="report prefix (.json and .md)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=("exact", "buckets"), default="exact", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        sys.stdout.write(json.dumps(one_variant(args)) + "\n")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_start = [round(value, 2) for value in os.getloadavg()]
    loadings = MODULE_LOADING if args.device == "cuda" else ("default",)
    variants = []
    for loading in loadings:
        for variant in ("exact", "buckets"):
            variants.append(run_variant(args, variant, loading))
            log.info("%s", variants[-1])
    results = {
        "bundle": args.bundle.name, "device": args.device, "calls": args.calls, "max_rows": args.max_rows,
        "seed": args.seed, "variants": variants,
        "load_avg": {"start": load_start, "end": [round(value, 2) for value in os.getloadavg()]},
    }  # fmt: skip
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(results))
    sys.stdout.write(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
