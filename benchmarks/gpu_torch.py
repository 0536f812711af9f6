"""The transformers pipeline on torch, fp16 on the GPU: the peer ``benchmarks.gpu`` times bertserve against.

Run in its own process (torch and its CUDA context stay out of the benchmark's): prints one JSON line with the
pipeline's throughput over the texts at batch size 32 (its own batching, texts in the order given) and the
median latency of one text.

    python -m benchmarks.gpu_torch CHECKPOINT TEXTS.json [--seconds 1] [--device cuda]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BATCH_SIZES = (32,)


def timed(call: Any, seconds: float, minimum: int = 1) -> list[float]:
    """Call ``call()`` until ``seconds`` have passed (at least ``minimum`` times): each call's seconds. (Standard
    library only: this module runs on a GPU machine with torch and nothing of ours installed.)"""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < minimum:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_torch", description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("texts", type=Path, help="a JSON list of texts")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    import torch
    import transformers

    texts: list[str] = json.loads(args.texts.read_text())
    dtype = torch.float16 if args.device == "cuda" else torch.float32
    try:
        pipe = transformers.pipeline("text-classification", model=str(args.checkpoint), device=args.device, dtype=dtype)
    except TypeError:  # transformers 4.x names it torch_dtype
        pipe = transformers.pipeline(
            "text-classification", model=str(args.checkpoint), device=args.device, torch_dtype=dtype
        )
    pipe(texts[:64], batch_size=32, truncation=True)
    rates: dict[str, float] = {}
    for size in BATCH_SIZES:
        passes = timed(lambda size=size: pipe(texts, batch_size=size, truncation=True), args.seconds, 1)
        rates[str(size)] = round(len(texts) * len(passes) / sum(passes), 1)
    index = iter(range(10**9))
    singles = timed(lambda: pipe(texts[next(index) % len(texts)], truncation=True), args.seconds, 20)
    result: dict[str, Any] = {
        "sequences_per_s": rates, "batch1_p50_ms": round(1000 * statistics.median(singles), 3),
        "torch": torch.__version__, "transformers": transformers.__version__, "dtype": str(dtype),
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
    }  # fmt: skip
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
