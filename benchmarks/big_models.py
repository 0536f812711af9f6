"""Big models: BERT-base and BERT-large (random weights, 512 positions) through export and serving.

For each size (``benchmarks.random_bert``: base 12 x 768, 12 heads, FFN 3072; large 24 x 1024, 16 heads, FFN 4096;
``tiny`` 2 x 128 for smoke runs) it builds a sequence-classification checkpoint with the MiniLM package's tokenizer,
exports it fp32 and int8 with ``python -m model_export`` (wall time, peak RSS of the export process), and for each
bundle and input length (128 and 512 tokens, [CLS] and [SEP] included, cut from WikiText-2 valid):

- raw ORT, in this process (``benchmarks.raw_ort``: one session, min(2, cores) intra-op threads, tokenization
  included): the best throughput over ``--raw-batch-sizes`` and the median latency of batch 1;
- served (``python -m service`` with its defaults and ``--server-args``): the start-up time to /health/ready, RSS at
  ready against the ONNX file, throughput at c=32 (answers/s between completions after a warm-up), p50 at c=1,
  and RSS after the load.

Each measured point runs ``--duration`` seconds (a c=32 point waits for two completion moments past its warm-up, a
raw point for one whole batch); before each served point the server's CPU goes idle first. With the defaults (base
and large, fp32 and int8, 128 and 512, 12 s points) a run takes ~15 minutes on 2 cores, ~4.5 of them exporting; it
needs ~14 GB of memory free (BERT-large's int8 export) and ~4.5 GB of disk under ``--work-dir``.

    python -m benchmarks.big_models                                        # base + large -> results/big_models.*
    python -m benchmarks.big_models --sizes tiny --duration 2 --out benchmarks/scratch/big_models-smoke
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import itertools
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import raw_ort, servers
from benchmarks.big_models_report import markdown
from benchmarks.datasets import DATA_DIR_ENV, REPO_ROOT, RESULTS_DIR, SCRATCH_DIR, DataDirNotFound
from benchmarks.gpu_torch import timed
from benchmarks.overload_client import Tally, closed_loop, percentile, rss_bytes, wait_idle
from benchmarks.overload_loads import FALLBACK_TEXTS, bundle_tokenizer, texts_of_tokens, wikitext_text
from benchmarks.random_bert import SIZES, ensure_checkpoint, export
from model_export.family_checkpoints import BASE_SIZES

log = logging.getLogger("benchmarks.big_models")
RESULTS_PREFIX = RESULTS_DIR / "big_models"
WORK_DIR = SCRATCH_DIR / "big_models"
TASK = "text-classification"
ROUTE = "/v1/text-classification"
SERVED_NAME = "big"
INPUTS_PER_LENGTH = 64
IDLE_WAIT_S = 120.0  # at most, for the server's CPU to go idle before a served point
EXPORT_OPTIONS = {"fp32": ["--quantize", "none"], "int8": ["--quantize", "int8"]}


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def csv_of(kind: type) -> Any:
    return lambda value: [kind(item) for item in value.split(",") if item]


def onnx_bytes(bundle: Path) -> int:
    """The graph's bytes on disk: model.onnx and its external data, if any."""
    return sum(path.stat().st_size for path in bundle.glob("*.onnx*") if path.is_file())


def length_inputs(bundle: Path, lengths: list[int], count: int = INPUTS_PER_LENGTH) -> dict[int, list[str]]:
    """Per length, ``count`` texts of that many tokens (just under it where a cut word re-tokenizes longer)."""
    try:
        text = wikitext_text()
    except DataDirNotFound:
        log.warning("no shared data: inputs cut from a few fixed sentences repeated")
        text = " ".join(FALLBACK_TEXTS * 4000)
    tokenizer = bundle_tokenizer(bundle)
    return {length: texts_of_tokens(tokenizer, text, length, count) for length in lengths}


def measure_raw(bundle: Path, texts: list[str], batch_sizes: list[int], seconds: float) -> dict[str, Any]:
    """Raw ORT on ``texts``: throughput per batch size (``seconds`` shared between them) and the batch-1 median."""
    tokenizer = raw_ort.bundle_tokenizer(bundle, TASK)
    session = raw_ort.open_session(bundle / "model.onnx")  # freed when this returns (measure_size collects)
    raw_ort.one_pass(session, tokenizer, TASK, texts[:2], 2)  # first-run allocations
    sweep: dict[str, float] = {}
    for batch_size in batch_sizes:
        offset = 0

        def one_batch(size: int = batch_size) -> None:
            nonlocal offset
            batch = [texts[(offset + k) % len(texts)] for k in range(size)]
            offset += size
            raw_ort.one_pass(session, tokenizer, TASK, batch, size)

        times = timed(one_batch, seconds / len(batch_sizes))
        sweep[str(batch_size)] = batch_size * len(times) / sum(times)
    singles = itertools.cycle(texts)
    batch_one = timed(lambda: raw_ort.one_pass(session, tokenizer, TASK, [next(singles)], 1), seconds, 3)
    best = max(sweep, key=lambda key: sweep[key])
    return {
        "sequences_per_s": sweep[best],
        "best_batch_size": int(best),
        "sweep": {key: round(value, 3) for key, value in sweep.items()},
        "batch1_median_ms": 1000 * statistics.median(batch_one),
        "batch1_runs": len(batch_one),
        "threads": min(2, os.cpu_count() or 1),
    }


def latencies_after(tally: Tally, moment: float) -> list[float]:
    """Latencies of the 200s that finished after ``moment`` (the warm-up's end)."""
    return [lat for lat, end in zip(tally.admitted_latencies, tally.admitted_finished, strict=True) if end > moment]


async def measure_served_length(
    server: servers.Server, port: int, texts: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    bodies = [json.dumps({"model": SERVED_NAME, "inputs": text, "truncation": True}).encode() for text in texts]
    waited = 0.0
    points: dict[str, Any] = {}
    for clients in args.concurrency:
        waited += await wait_idle(server.pid, IDLE_WAIT_S)  # what the last point left running ends first
        rate, tally = await closed_loop("127.0.0.1", port, ROUTE, bodies, clients, args.warmup, args.duration,
                                        args.timeout)  # fmt: skip
        points[f"c{clients}_sequences_per_s"] = rate
        points[f"c{clients}_statuses"] = dict(sorted(tally.statuses.items()))
    waited += await wait_idle(server.pid, IDLE_WAIT_S)
    started = time.perf_counter()
    _, single = await closed_loop("127.0.0.1", port, ROUTE, bodies, 1, args.warmup, args.duration, args.timeout)
    latencies = latencies_after(single, started + args.warmup)
    p50 = percentile(latencies, 0.5)
    return {
        **points,
        "c1_p50_ms": None if p50 is None else 1000 * p50,
        "c1_requests": len(latencies),
        "c1_statuses": dict(sorted(single.statuses.items())),
        "waited_for_idle_s": waited,
    }


def measure_served(bundle: Path, inputs: dict[int, list[str]], args: argparse.Namespace) -> dict[str, Any]:
    port = servers.free_port()
    command = servers.bertserve_command({SERVED_NAME: bundle}, port)
    command += ["--host", "127.0.0.1", "--log-level", "warning", *shlex.split(args.server_args)]
    started = time.perf_counter()
    with servers.running(f"big-{bundle.name}", command, port, "/health/ready", args.work_dir / "logs") as server:
        ready_s = time.perf_counter() - started
        rss_ready = rss_bytes(server.pid)
        cards = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["models"]
        lengths = {
            str(length): asyncio.run(measure_served_length(server, port, texts, args))
            for length, texts in inputs.items()
        }
        rss_after = rss_bytes(server.pid)
    return {
        "startup_s": ready_s, "rss_ready_bytes": rss_ready, "rss_after_load_bytes": rss_after, "lengths": lengths,
        "batching": cards[0].get("batching"),
    }  # fmt: skip


def export_bundle(checkpoint: Path, bundle: Path, quantization: str, reuse: bool) -> dict[str, Any]:
    """Export (or, with ``reuse``, keep a bundle exported before and its recorded figures)."""
    record = bundle.with_name(bundle.name + ".export.json")
    if reuse and (bundle / "bundle.json").is_file() and record.is_file():
        return {**json.loads(record.read_text()), "reused": True}
    run = export(checkpoint, bundle, [*EXPORT_OPTIONS[quantization], "--quiet"], bundle.with_name(bundle.name + ".log"))
    spec = json.loads((bundle / "bundle.json").read_text())
    figures = {**run.to_json(), "fused_operators": spec.get("fused_operators"), "max_length": spec.get("max_length")}
    record.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def ensure_family_checkpoint(out: Path, family: str) -> float:
    """A base-sized random ``family`` classifier with its family's own tokenizer, built in a child process."""
    if (out / "config.json").is_file():
        return 0.0
    command = [sys.executable, "-m", "model_export.family_checkpoints", family, TASK, str(out), "--base"]
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def measure_size(size: str, args: argparse.Namespace, results: dict[str, Any]) -> None:
    checkpoint = args.work_dir / f"{size}-checkpoint"
    if size in BASE_SIZES:
        build_s, dims = ensure_family_checkpoint(checkpoint, size), {"family": size, **BASE_SIZES[size]}
    else:
        build_s, dims = ensure_checkpoint(checkpoint, size, log_dir=args.work_dir / "logs"), SIZES[size].__dict__
    for quantization in args.quantizations:
        bundle = args.work_dir / f"{size}-{quantization}"
        exported = export_bundle(checkpoint, bundle, quantization, args.reuse_bundles)
        inputs = length_inputs(bundle, args.lengths)
        rounds = []
        for _ in range(args.rounds):  # raw, served, raw, served, ...: drift reaches both sides alike
            raw = {str(length): measure_raw(bundle, texts, args.raw_batch_sizes, args.duration)
                   for length, texts in inputs.items()}  # fmt: skip
            gc.collect()  # the raw sessions' memory goes before the server starts
            rounds.append({"raw": raw, "served": measure_served(bundle, inputs, args)})
        raw, served = median_leaves([r["raw"] for r in rounds]), median_leaves([r["served"] for r in rounds])
        tokenizer = bundle_tokenizer(bundle)
        results["bundles"].append({
            "size": size, "dims": dims, "quantization": quantization, "bundle": str(bundle),
            "checkpoint_build_s": build_s, "export": exported, "onnx_bytes": onnx_bytes(bundle),
            "tokens": {str(length): sorted({len(tokenizer.encode(text).ids) for text in texts})
                       for length, texts in inputs.items()},
            "raw": raw, "served": served, **({"rounds": rounds} if args.rounds > 1 else {}),
        })  # fmt: skip
        log.info("%s %s: raw %s, served %s", size, quantization, raw, served)
        write(results, args.out)


def median_leaves(values: list[Any]) -> Any:
    """The rounds' figures as one: the median of each number (of whole numbers, a batch size or a count, one that was
    measured), a dict's keys the same way (answers by status: their sum), anything else the first round's."""
    first = values[0]
    if isinstance(first, dict) and all(isinstance(value, dict) for value in values):
        return {
            key: dict(sum((collections.Counter(value[key]) for value in values), collections.Counter()))
            if key.endswith("_statuses") else median_leaves([value[key] for value in values if key in value])
            for key in first
        }  # fmt: skip
    numbers = [value for value in values if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if len(numbers) == len(values) and not isinstance(first, bool):
        whole = all(isinstance(number, int) for number in numbers)
        return statistics.median_low(numbers) if whole else statistics.median(numbers)
    return first


def write(results: dict[str, Any], out: Path) -> None:
    results["load_avg"]["end"] = load_average()
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(results, indent=2) + "\n"
    # committed: the interpreter and the checkout's own paths, not this machine's (export records its command)
    text = text.replace(json.dumps(sys.executable)[1:-1], "python").replace(json.dumps(f"{REPO_ROOT}/")[1:-1], "")
    out.with_suffix(".json").write_text(text)
    out.with_suffix(".md").write_text(markdown(results))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.big_models", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=csv_of(str),
        default=["base", "large"],
        help=f"of {sorted(SIZES)}, or a family: {sorted(BASE_SIZES)}",
    )
    parser.add_argument("--quantizations", type=csv_of(str), default=["fp32", "int8"])
    parser.add_argument("--lengths", type=csv_of(int), default=[128, 512], help="input tokens ([CLS], [SEP] included)")
    parser.add_argument("--duration", type=float, default=12.0, help="seconds per measured point")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of warm-up before a served point")
    parser.add_argument(
        "--concurrency", type=csv_of(int), default=[8, 32], help="clients of the served throughput points"
    )
    parser.add_argument("--raw-batch-sizes", type=csv_of(int), default=[8, 32], help="raw ORT batch sizes tried")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="raw then served, this many times; the report gives medians and each round's served / raw",
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="client-side timeout per request (s)")
    parser.add_argument("--server-args", default="", help="extra flags for python -m service")
    parser.add_argument("--reuse-bundles", action="store_true", help="keep bundles (and export figures) from before")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR, help="checkpoints, bundles and logs (large: 7 GB)")
    parser.add_argument("--out", type=Path, default=RESULTS_PREFIX, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    unknown = [size for size in args.sizes if size not in SIZES and size not in BASE_SIZES] + [
        q for q in args.quantizations if q not in EXPORT_OPTIONS
    ]
    if unknown or max(args.lengths) > 512 or min(args.lengths) < 3:
        parser.error(f"unknown sizes / quantizations {unknown}, or lengths outside 3..512")
    command = "python -m benchmarks.big_models " + shlex.join(sys.argv[1:] if argv is None else argv)
    results: dict[str, Any] = {
        "command": command,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cpu_count": os.cpu_count(),
        "settings": {key: value for key, value in vars(args).items() if key not in ("out", "work_dir")},
        "server_env": {
            key: value for key, value in os.environ.items() if key.startswith("BERTSERVE_") and key != DATA_DIR_ENV
        },
        "load_avg": {"start": load_average()},
        "bundles": [],
    }
    started = time.perf_counter()
    for size in args.sizes:
        measure_size(size, args, results)
    results["wall_s"] = time.perf_counter() - started
    write(results, args.out)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
