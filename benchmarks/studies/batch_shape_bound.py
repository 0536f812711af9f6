"""``python -m benchmarks.studies.batch_shape_bound``: what the batches a closed loop of ``c`` clients leaves queued
can reach at best, against the sorted raw loop, whatever the transport; and whether another cut would do better.

1. **The model's cost of a call**, measured: one one-thread session (a split runner's, ``service.sessions``) runs
   batches of ``k`` rows of ``n`` tokens (k = 1 .. 32, n = 16 .. 64), thread CPU time, median of repeats. The cost
   follows the padded tokens (rows x longest), whatever the shape; a line ``fixed + per_token x padded tokens``
   fitted by relative error gives ``fixed / per_token``, a call's cost in tokens (what ``--batch-overhead-tokens``
   stands for).
2. **The closed loop, simulated** on that cost (the measured costs interpolated by padded tokens): ``c`` clients
   each send one SST-2 dev sentence (its token count by the bundle's tokenizer), the next ``--think-ms`` after their
   answer; ``--workers`` one-thread runs side by side, each taking a batch when it is free from what is queued then,
   cut by the service's own ``choose_rows`` (the oldest row and its neighbours in length) at several overhead
   values, or by the densest group around any of the oldest 8 rows; the sorted raw loop on the same cost:
   512-sentence chunks sorted by length, batches of 8 or 32.

The simulation has no Python, no hand-offs, no contention: what it finds is a ceiling the batches set, above any
server with these cuts.

    python -m benchmarks.studies.batch_shape_bound benchmarks/scratch/sst2-fp32 \\
        --out benchmarks/results/batch_shape_bound-fp32
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.datasets import REPO_ROOT
from benchmarks.loads import load_inputs
from benchmarks.raw_ort import bundle_tokenizer
from benchmarks.report import load_average, shown_path, write_report
from contract.bundle import read_bundle
from contract.onnx_io import ort_session, pad_rows
from service.batch_rows import choose_rows
from service.settings import Settings

Cut = Callable[[list[int], float], list[int]]
SIZES, LENGTHS, REPEATS = (1, 2, 4, 8, 16, 32), (16, 32, 64), 7
MAX_TOKENS, MAX_ROWS = Settings().max_batch_tokens, Settings().max_batch_size


def measure_cost(bundle: Path) -> dict[str, Any]:
    """Thread CPU seconds of one-thread runs of k x n token batches, and the fitted fixed + per-token line."""
    session = ort_session(bundle / "model.onnx", threads=1, spin=False)
    names = [node.name for node in session.get_inputs()]
    points = []
    for size in SIZES:
        for length in LENGTHS:
            ids = list(range(1000, 1000 + length))
            feeds = pad_rows([(ids, [0] * length)] * size, 0).feeds
            inputs = {name: feeds[name] for name in names}
            session.run(None, inputs)
            times = []
            for _ in range(REPEATS):
                started = time.thread_time()
                session.run(None, inputs)
                times.append(time.thread_time() - started)
            points.append({"rows": size, "length": length, "ms": round(1000 * statistics.median(times), 3)})
    tokens = np.array([p["rows"] * p["length"] for p in points], dtype=float)
    ms = np.array([p["ms"] for p in points])
    per_token, fixed = np.polyfit(tokens, ms, 1, w=1 / ms)
    residual = float(np.max(np.abs(ms - (fixed + per_token * tokens)) / ms))
    return {"points": points, "fixed_ms": round(float(fixed), 4), "per_token_ms": round(float(per_token), 5),
            "call_tokens": round(float(fixed / per_token), 1), "worst_fit_error": round(residual, 3)}  # fmt: skip


def interpolated(fit: dict[str, Any]) -> Callable[[int, int], float]:
    """Milliseconds of a batch of ``rows`` rows whose longest is ``longest``: the measured costs by padded tokens
    (the mean of the shapes of one size), joined by straight lines and extended by the end segments' slopes."""
    by_size: dict[int, list[float]] = {}
    for point in fit["points"]:
        by_size.setdefault(point["rows"] * point["length"], []).append(point["ms"])
    sizes = np.array(sorted(by_size), dtype=float)
    costs = np.array([statistics.mean(by_size[int(size)]) for size in sizes])

    def cost(rows: int, longest: int) -> float:
        padded = rows * longest
        if padded < sizes[0]:
            return float(costs[0] - (sizes[0] - padded) * (costs[1] - costs[0]) / (sizes[1] - sizes[0]))
        if padded > sizes[-1]:
            return float(costs[-1] + (padded - sizes[-1]) * (costs[-1] - costs[-2]) / (sizes[-1] - sizes[-2]))
        return float(np.interp(padded, sizes, costs))

    return cost


def oldest_cut(lengths: list[int], overhead: float) -> list[int]:
    return choose_rows(lengths, MAX_TOKENS, MAX_ROWS, overhead)


def densest_cut(lengths: list[int], overhead: float, anchors: int = 8) -> list[int]:
    """``choose_rows`` around each of the oldest ``anchors`` rows; the group with the best real / (padded + call)."""
    best: list[int] = []
    score = -1.0
    for anchor in range(min(anchors, len(lengths))):
        order = list(range(len(lengths)))
        order[0], order[anchor] = anchor, 0
        picked = [order[k] for k in choose_rows([lengths[k] for k in order], MAX_TOKENS, MAX_ROWS, overhead)]
        real = sum(lengths[k] for k in picked)
        value = real / (len(picked) * max(lengths[k] for k in picked) + overhead)
        if value > score:
            best, score = picked, value
    return best


def simulate(lengths: list[int], cost: Callable[[int, int], float], cut: Cut, overhead: float, clients: int,
             workers: int, think_ms: float, seconds: float = 120.0, seed: int = 0) -> dict[str, float]:  # fmt: skip
    """The closed loop on the cost model: rows/s, rows per batch, padding share."""
    rng = random.Random(seed)
    events: list[tuple[float, int, Any]] = [(rng.random() * think_ms, 0, client) for client in range(clients)]
    heapq.heapify(events)
    queue: list[tuple[int, int]] = []  # (length, client), oldest first
    free, done, batches, real, padded, order = workers, 0, 0, 0, 0, 0
    horizon = 1000 * seconds
    while events:
        now, kind, payload = heapq.heappop(events)
        if now > horizon:
            break
        if kind == 0:
            queue.append((rng.choice(lengths), payload))
        else:
            free += 1
            done, batches = done + len(payload), batches + 1
            real += sum(length for length, _ in payload)
            padded += len(payload) * max(length for length, _ in payload)
            for _, client in payload:
                heapq.heappush(events, (now + think_ms, 0, client))
        while free and queue:
            picked = set(cut([length for length, _ in queue], overhead))
            batch = [row for k, row in enumerate(queue) if k in picked]
            queue = [row for k, row in enumerate(queue) if k not in picked]
            free -= 1
            order += 1
            heapq.heappush(events, (now + cost(len(batch), max(length for length, _ in batch)), 1 + order, batch))
    return {"rows_per_s": round(1000 * done / horizon, 1), "rows_per_batch": round(done / max(1, batches), 2),
            "padding": round(1 - real / max(1, padded), 4)}  # fmt: skip


def sorted_raw(lengths: list[int], cost: Callable[[int, int], float], workers: int, batch: int) -> float:
    """Rows/s of 512-sentence chunks sorted by length in batches of ``batch``, ``workers`` runs side by side."""
    rng = random.Random(1)
    total_ms = rows = 0.0
    for _ in range(40):
        chunk = sorted(rng.choice(lengths) for _ in range(512))
        for start in range(0, len(chunk), batch):
            part = chunk[start : start + batch]
            total_ms += cost(len(part), max(part))
            rows += len(part)
    return round(1000 * workers * rows / total_ms, 1)


def markdown(report: dict[str, Any]) -> str:
    fit = report["cost"]
    lines = [
        "# What the batches of a closed loop can reach (batch_shape_bound)",
        "",
        f"Tree {report['tree']}; bundle {report['bundle']}; SST-2 dev sentences; {report['workers']} one-thread runs "
        f"side by side; a client's next sentence {report['think_ms']:g} ms after its answer; load average at start "
        f"{report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        "",
        f"A one-thread call costs about **{fit['fixed_ms']:.2f} ms + {1000 * fit['per_token_ms']:.1f} us per padded "
        f"token**: a call is worth **{fit['call_tokens']:.0f} tokens** (a line fitted by relative error, worst "
        f"{100 * fit['worst_fit_error']:.0f} % off, over {len(fit['points'])} shapes, rows {SIZES[0]}-{SIZES[-1]} x "
        f"{LENGTHS[0]}-{LENGTHS[-1]} tokens; the simulation takes the measured costs themselves).",
        "",
        f"The sorted raw loop on that cost: batches of 8 **{report['raw']['8']:.1f}** rows/s, of 32 "
        f"{report['raw']['32']:.1f} (the bound below is against the better).",
        "",
        "| c | cut | overhead tokens | rows/s | / sorted raw | rows/batch | padding |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    raw = max(report["raw"].values())
    for point in report["points"]:
        lines.append(f"| {point['clients']} | {point['cut']} | {point['overhead']:g} | {point['rows_per_s']:.1f} "
                     f"| {point['rows_per_s'] / raw:.2f} | {point['rows_per_batch']:.1f} "
                     f"| {100 * point['padding']:.1f} % |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.batch_shape_bound",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("bundle", type=Path, help="a text-classification or feature-extraction bundle")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[32, 128])
    parser.add_argument("--overhead-tokens", type=lambda t: [float(c) for c in t.split(",")], default=[16, 32, 64])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--think-ms", type=float, default=0.8, help="a client's time between answer and next row")
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    load_at_start = os.getloadavg()
    bundle = args.bundle.resolve()
    task = read_bundle(bundle).spec.task
    tokenizer = bundle_tokenizer(bundle, task).tokenizer
    lengths = [len(encoding.ids) for encoding in tokenizer.encode_batch(load_inputs("sst2"))]
    fit = measure_cost(bundle)
    cost = interpolated(fit)

    points = []
    for clients in args.concurrency:
        for name, cut in (
            ("oldest row's neighbours (the service's)", oldest_cut),
            ("densest of the oldest 8", densest_cut),
        ):
            for overhead in args.overhead_tokens:
                found = simulate(lengths, cost, cut, overhead, clients, args.workers, args.think_ms)
                points.append({"clients": clients, "cut": name, "overhead": overhead, **found})
    from benchmarks.ab import revision

    report = {
        "tree": revision(REPO_ROOT), "bundle": shown_path(bundle), "workers": args.workers, "think_ms": args.think_ms,
        "cost": fit, "raw": {str(size): sorted_raw(lengths, cost, args.workers, size) for size in (8, 32)},
        "points": points, "load_avg": load_average(load_at_start),
    }  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
