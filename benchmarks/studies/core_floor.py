"""``python -m benchmarks.studies.core_floor``: how much of a small model's gap to the sorted raw loop is the HTTP
transport, and how much is the core's batches, that no transport can take back?

Side by side, interleaved round by round, on one model and load (``benchmarks.loads``: ``sst2`` on
``/v1/text-classification``, ``embeddings`` on ``/v1/embeddings``, one sentence a request):

- **raw**: ``benchmarks.raw_ort.measure``, the issue's bound (the dev set in length-sorted chunks, the best batch);
- **core**: the service without a transport, in this process: the engine ``python -m service`` builds (start-up
  tuning, split sessions, batcher, workers) and ``concurrency`` clients in a closed loop, each doing what the
  inference entry does for one body (validate it as the route's request model, ``Engine.infer``, the route's
  answer as JSON bytes); its batches' rows and padding come from the engine's batch observer;
- **served**: the server through HTTP under wrk (``benchmarks.overhead.measure_server``, default settings).

core / raw is what the batches cut from a closed loop of ``concurrency`` clients leave of the raw loop (plus
tokenizing and the hand-offs); served / core is what HTTP, the middlewares and the event loop's share of two cores
take on top. ``--overhead-tokens`` adds core points at other ``--batch-overhead-tokens`` values (the batcher's
padding-versus-calls trade), measured without HTTP's noise.

    python -m benchmarks.studies.core_floor --model sst2=benchmarks/scratch/sst2-fp32 --concurrency 1,32,128 \\
        --rounds 3 --out benchmarks/results/core_floor-fp32
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import overhead, raw_ort
from benchmarks.datasets import REPO_ROOT
from benchmarks.loads import ROUTES, bertserve_loads, bertserve_path, load_inputs
from benchmarks.report import load_average, shown_path, write_report
from service.api.bodies import JSON_MEDIA_TYPE, encode_json, validated_json_body
from service.api.entry import Decoded, InferenceRoute, Reply
from service.api.protocols import INFERENCE_ROUTES
from service.core import InferenceRequest, InferenceResult
from service.engine import Engine
from service.errors import Overloaded
from service.runtime import BatchStats
from service.settings import Settings

log = logging.getLogger("benchmarks.studies.core_floor")
WARMUP_S = 2.0
RETRY_S = 0.01  # after a 429 (Overloaded) at the door


@dataclass
class Shapes:
    """The engine's batch observer: rows, padded and real tokens, model seconds, since the last ``reset``."""

    batches: int = 0
    rows: int = 0
    padded: int = 0
    real: int = 0
    model_s: float = 0.0

    def on_batch(self, stats: BatchStats) -> None:
        self.batches += 1
        self.rows += stats.rows
        self.padded += stats.padded_tokens
        self.real += stats.real_tokens
        self.model_s += stats.inference_seconds

    def reset(self) -> None:
        self.batches = self.rows = self.padded = self.real = 0
        self.model_s = 0.0


def route_of(path: str) -> InferenceRoute:
    return next(route for route in INFERENCE_ROUTES if route.path == path and route.body is not None)


async def closed_loop(engine: Engine, route: InferenceRoute, bodies: list[bytes], clients: int, seconds: float) -> int:
    """``clients`` callers, each sending the next body as soon as its last one is answered; requests answered. A
    request refused at the door (Overloaded, HTTP's 429: a first burst of long inputs while the prepare stage still
    calibrates) is sent again after ``RETRY_S``, as a client honouring 429 would."""
    assert route.body is not None
    body_model = route.body
    done = 0
    stop_at = time.perf_counter() + seconds

    async def client(first: int) -> None:
        nonlocal done
        index = first
        while time.perf_counter() < stop_at:
            decoded = Decoded(validated_json_body(body_model, bodies[index % len(bodies)], JSON_MEDIA_TYPE))
            request = InferenceRequest.of(decoded.request)
            try:
                results = await engine.infer(request.inputs, request.params)
            except Overloaded:
                await asyncio.sleep(RETRY_S)
                continue
            reply = route.answer(decoded, InferenceResult(engine.name, results))
            if not isinstance(reply, Reply):
                encode_json(reply)
            done += 1
            index += clients

    await asyncio.gather(*(client(k) for k in range(clients)))
    return done


async def measure_core(
    bundle: Path,
    load: str,
    concurrencies: list[int],
    seconds: float,
    overhead_tokens: float | None,
    device: str | None = None,
    bodies: list[bytes] | None = None,
    extra: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The core's closed-loop points on ``device`` (None: the settings' default, ``BERTSERVE_DEVICE`` or cpu);
    ``bodies``: the requests to send (default: the load's own); ``extra``: more settings."""
    chosen: dict[str, Any] = {**(extra or {})} if device is None else {**(extra or {}), "device": device}
    if overhead_tokens is not None:
        chosen["batch_overhead_tokens"] = overhead_tokens
    settings = Settings(**chosen)
    shapes = Shapes()
    engine = Engine.from_bundle(bundle, settings, name=load, observer=shapes)
    await engine.start()
    route = route_of(bertserve_path(load))
    if bodies is None:
        bodies = [encode_json(body) for body in bertserve_loads(load, load)[0].bodies]
    points = []
    try:
        for clients in concurrencies:
            await closed_loop(engine, route, bodies, clients, WARMUP_S)
            shapes.reset()
            cpu, wall = time.process_time(), time.perf_counter()
            requests = await closed_loop(engine, route, bodies, clients, seconds)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            points.append({
                "concurrency": clients, "sequences_per_s": round(requests / wall, 2),
                "cpu_ms_per_request": round(1000 * cpu / max(1, requests), 3),
                "rows_per_batch": round(shapes.rows / max(1, shapes.batches), 2),
                "padding": round(1 - shapes.real / max(1, shapes.padded), 4),
                "model_ms_per_row": round(1000 * shapes.model_s / max(1, shapes.rows), 3),
            })  # fmt: skip
            log.info("core %s c=%d overhead=%s: %.1f seq/s", load, clients, overhead_tokens, requests / wall)
    finally:
        await engine.stop()
    return points


def median_of(rounds: list[list[dict[str, Any]]], key: str) -> dict[int, float]:
    """Per concurrency, the median of ``key`` over rounds."""
    values: dict[int, list[float]] = {}
    for points in rounds:
        for point in points:
            values.setdefault(point["concurrency"], []).append(point[key])
    return {clients: statistics.median(found) for clients, found in values.items()}


def markdown(report: dict[str, Any]) -> str:
    raw = statistics.median(report["raw"])
    core, served = report["core"]["default"], report["served"]
    core_rate, served_rate = median_of(core, "sequences_per_s"), median_of(served, "sequences_per_s")
    lines = [
        "# The core's floor: raw loop, the service in process, the server through HTTP",
        "",
        f"Tree {report['tree']}; model `{report['model']}` ({report['bundle']}), route `{report['route']}`, one "
        f"sentence a request; {report['rounds']} rounds, interleaved, {report['duration_s']:g} s a point, medians; "
        f"load average at start {report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        "",
        "| c | raw seq/s | core seq/s | served seq/s | core / raw | served / raw | served / core "
        "| core rows/batch | core padding | core model ms/row | core CPU ms/req | served CPU ms/req |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows, padding = median_of(core, "rows_per_batch"), median_of(core, "padding")
    model_ms, core_cpu = median_of(core, "model_ms_per_row"), median_of(core, "cpu_ms_per_request")
    served_cpu = median_of(served, "cpu_ms_per_request")
    for clients in sorted(core_rate):
        lines.append(
            f"| {clients} | {raw:.1f} | {core_rate[clients]:.1f} | {served_rate[clients]:.1f} "
            f"| {core_rate[clients] / raw:.2f} | {served_rate[clients] / raw:.2f} "
            f"| {served_rate[clients] / core_rate[clients]:.2f} | {rows[clients]:.1f} | {100 * padding[clients]:.0f} % "
            f"| {model_ms[clients]:.2f} | {core_cpu[clients]:.2f} | {served_cpu[clients]:.2f} |"
        )
    if len(report["core"]) > 1:
        lines += ["", "## The core at other `--batch-overhead-tokens` values", "",
                  "| overhead tokens | c | core seq/s | core / raw | rows/batch | padding |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for name, rounds in report["core"].items():
            rate, rows, padding = (median_of(rounds, key) for key in ("sequences_per_s", "rows_per_batch", "padding"))
            for clients in sorted(rate):
                lines.append(f"| {name} | {clients} | {rate[clients]:.1f} | {rate[clients] / raw:.2f} "
                             f"| {rows[clients]:.1f} | {100 * padding[clients]:.0f} % |")  # fmt: skip
    raw_line = ", ".join(f"{value:.1f}" for value in report["raw"])
    lines += ["", f"Raw loop per round: {raw_line} seq/s. Per-round points are in the JSON report."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.core_floor", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="LOAD=BUNDLE: sst2 or embeddings (as benchmarks.overhead)")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[1, 32, 128])
    parser.add_argument("--overhead-tokens", type=lambda t: [float(c) for c in t.split(",")], default=[])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_at_start = os.getloadavg()
    load, _, path = args.model.partition("=")
    bundle = Path(path).resolve()
    served_args = argparse.Namespace(concurrency=args.concurrency, warmup=3.0, duration=args.duration, profile=False)
    inputs = load_inputs(load)
    variants: list[float | None] = [None, *args.overhead_tokens]
    raw: list[float] = []
    core: dict[str, list[list[dict[str, Any]]]] = {"default" if v is None else f"{v:g}": [] for v in variants}
    served: list[list[dict[str, Any]]] = []
    for number in range(args.rounds):
        steps = ["raw", "core", "served"] if number % 2 == 0 else ["served", "core", "raw"]
        for step in steps:
            if step == "raw":
                raw.append(round(raw_ort.measure(bundle, ROUTES[load], inputs, args.duration).sequences_per_s, 2))
            elif step == "served":
                served.append(overhead.measure_server(served_args, load, bundle, load))
            else:
                for variant in variants if number % 2 == 0 else variants[::-1]:
                    name = "default" if variant is None else f"{variant:g}"
                    core[name].append(asyncio.run(measure_core(bundle, load, args.concurrency, args.duration, variant)))
    from benchmarks.ab import revision

    report = {
        "tree": revision(REPO_ROOT), "model": load, "bundle": shown_path(bundle),
        "route": bertserve_path(load), "rounds": args.rounds, "duration_s": args.duration,
        "raw": raw, "core": core, "served": served, "load_avg": load_average(load_at_start),
    }  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
