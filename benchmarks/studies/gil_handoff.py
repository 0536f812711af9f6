"""``python -m benchmarks.studies.gil_handoff``: what a batch costs inside the service beyond its device time when
the model runs off the CPU (a GPU) and the event loop is busy: a card's question asked without a card.

On the H200 (``benchmarks/results/gpu.md``) served batches took 4-5x longer inside the server than the same rows in
the raw loop even where the load brings few shapes (BERT-base, 128-token inputs, c=32: 9.7 rows in 8.1 ms against
~1.8 ms). A cause that needs no card: a worker thread that lets go of the GIL (ONNX Runtime's run, numpy copies of
500 elements or more, waking the event loop) waits to take it back while the event loop's thread runs Python, up to
the interpreter's switch interval (5 ms by default) each time. This study puts a stand-in for the device into the
service's own engine: a runner that sleeps with the GIL released for ``--device-ms + --row-ms x rows`` (default: the
H200's raw MiniLM SST-2 calls, 1.0 ms + 0.008 ms a row) and returns zero logits; the rest is the engine as served
(the H200's tuned batching for MiniLM: two workers running at once, 65,536-token batches; tokenizing, batcher,
post-processing), twice: in process under ``core_floor``'s closed loop of c clients (``core``: no HTTP), and as
the server, ``python -m service``'s app over uvicorn in its own process, under the GPU script's HTTP closed loop
(``served``), one SST-2 sentence a request. Per transport, switch interval and concurrency: sequences/s, rows a
batch, the worker's time a batch (what the server reports as ``bertserve_inference_seconds``) against the
stand-in's own sleep, and what the rows a batch would give if a batch took only its sleep. ``--processes 1,2`` serves
the ``served`` transport from that many processes (``python -m service --processes``), each with its stand-in and
every CPU (as on a GPU, where they are not pinned).

    python -m benchmarks.studies.gil_handoff --bundle benchmarks/scratch/sst2-fp32 --out benchmarks/results/gil_handoff
    python -m benchmarks.studies.gil_handoff --bundle BUNDLE --transports served --processes 1,2 --intervals 5 \
        --concurrency 1,32,128 --rounds 3 --duration 6 --out benchmarks/results/processes-stand-in
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import bertserve_loads, bertserve_path
from benchmarks.overload_client import closed_loop as http_closed_loop
from benchmarks.overload_client import percentile
from benchmarks.report import tree_commit
from benchmarks.studies.core_floor import WARMUP_S, Shapes, closed_loop, route_of
from contract.onnx_io import PaddedRows
from service.api.bodies import encode_json
from service.core import ServiceCore
from service.engine import Engine
from service.settings import Settings

log = logging.getLogger("benchmarks.studies.gil_handoff")
LOG_DIR = SCRATCH_DIR / "gil-handoff-logs"
ROUTE = "/v1/text-classification"
# The H200's tuned batching for MiniLM SST-2 fp16 (benchmarks/results/gpu.json, served_models.sst2).
GPU_BATCHING = {"tune": False, "intra_op_threads": 1, "model_workers": 2, "parallel_runs": 2,
                "max_batch_tokens": 65536, "max_batch_size": 1024, "batch_overhead_tokens": 9664.0}  # fmt: skip


class DeviceStandIn:
    """A runner whose batch takes ``device_ms + row_ms x rows`` with the GIL released, as a GPU call would."""

    def __init__(self, output_names: tuple[str, ...], labels: int, device_ms: float, row_ms: float) -> None:
        self.output_names = output_names
        self.labels, self.device_ms, self.row_ms = labels, device_ms, row_ms
        self._lock = threading.Lock()
        self.slept_s = 0.0

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        rows = len(batch.lengths)
        seconds = (self.device_ms + self.row_ms * rows) / 1000
        time.sleep(seconds)
        with self._lock:
            self.slept_s += seconds
        return {name: np.zeros((rows, self.labels), dtype=np.float32) for name in self.output_names}


def batching_settings(args: argparse.Namespace, **more: Any) -> Settings:
    """The H200's batching for MiniLM, with ``--parallel-runs`` (BERT-base's was 1)."""
    return Settings(**{**GPU_BATCHING, "parallel_runs": args.parallel_runs, **more})


def stand_in_for(engine: Engine, args: argparse.Namespace) -> DeviceStandIn:
    """Put a device stand-in under ``engine`` (before it starts: its warm-up runs on the stand-in too)."""
    spec = engine.bundle.spec
    stand_in = DeviceStandIn(tuple(spec.outputs), len(spec.id2label), args.device_ms, args.row_ms)
    engine.pool.runner = stand_in
    return stand_in


def sst2_bodies() -> list[bytes]:
    return [encode_json(body) for body in bertserve_loads("sst2", "sst2")[0].bodies]


async def measure_core(args: argparse.Namespace) -> list[dict[str, Any]]:
    """In process: the engine and ``core_floor``'s closed-loop clients on one event loop, per switch interval."""
    shapes = Shapes()
    engine = Engine.from_bundle(args.bundle, batching_settings(args), name="sst2", observer=shapes)
    stand_in = stand_in_for(engine, args)
    await engine.start()
    route, bodies = route_of(bertserve_path("sst2")), sst2_bodies()
    default_interval = sys.getswitchinterval()
    points: list[dict[str, Any]] = []
    try:
        for interval in args.intervals:
            sys.setswitchinterval(interval / 1000)
            for clients in args.concurrency:
                await closed_loop(engine, route, bodies, clients, WARMUP_S)
                shapes.reset()
                slept, cpu, wall = stand_in.slept_s, time.process_time(), time.perf_counter()
                requests = await closed_loop(engine, route, bodies, clients, args.duration)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                batches = max(1, shapes.batches)
                points.append({
                    "transport": "core", "processes": 1, "switch_interval_ms": interval, "concurrency": clients,
                    "sequences_per_s": round(requests / wall, 1), "rows_per_batch": round(shapes.rows / batches, 2),
                    "worker_ms_per_batch": round(1000 * shapes.model_s / batches, 3),
                    "device_ms_per_batch": round(1000 * (stand_in.slept_s - slept) / batches, 3),
                    "cpu_ms_per_request": round(1000 * cpu / max(1, requests), 3),
                })  # fmt: skip
                log.info("%s", points[-1])
    finally:
        sys.setswitchinterval(default_interval)
        await engine.stop()
    return points


def install_stand_in(core: ServiceCore, device_ms: float, row_ms: float, interval_ms: float, cpus: list[int]) -> None:
    """In a serving process, once its models are loaded: the stand-in under the model, the switch interval, and
    every CPU back (one of several processes is pinned to its share on a CPU device, as it would not be on a GPU;
    the threads made from here on inherit it)."""
    stand_in_for(core.registry.engines["sst2"], argparse.Namespace(device_ms=device_ms, row_ms=row_ms))
    sys.setswitchinterval(interval_ms / 1000)
    os.sched_setaffinity(0, cpus)


def serve(args: argparse.Namespace) -> int:
    """The server: ``python -m service``'s own serving (``--serve-processes`` of them on the port), each process's
    model session replaced by the stand-in."""
    from service.processes import serve_processes
    from service.serving import serve as serve_one

    settings = batching_settings(args, models=[f"sst2={args.bundle}"], host="127.0.0.1", port=args.port,
                                 processes=args.serve_processes)  # fmt: skip
    loaded = functools.partial(install_stand_in, device_ms=args.device_ms, row_ms=args.row_ms,
                               interval_ms=args.serve_interval, cpus=sorted(os.sched_getaffinity(0)))  # fmt: skip
    return serve_processes(settings, loaded) if args.serve_processes > 1 else serve_one(settings, loaded=loaded)


def measure_served(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Through HTTP: a server process per switch interval, loaded by the GPU script's closed loop from this one."""
    from benchmarks.gpu import batch_counters, batch_figures

    bodies, points = sst2_bodies(), []
    for processes, interval in [(processes, interval) for processes in args.processes for interval in args.intervals]:
        port = servers.free_port()
        command = [sys.executable, "-m", "benchmarks.studies.gil_handoff", "--serve", "--bundle", str(args.bundle),
                   "--port", str(port), "--device-ms", str(args.device_ms), "--row-ms", str(args.row_ms),
                   "--serve-interval", str(interval), "--parallel-runs", str(args.parallel_runs),
                   "--serve-processes", str(processes)]  # fmt: skip
        with servers.running("stand-in", command, port, "/health/ready", LOG_DIR) as server:
            for clients in args.concurrency:
                counters, cpu = batch_counters(port, "sst2"), servers.session_cpu_seconds(server.pid)
                started = time.perf_counter()
                rate, tally = asyncio.run(http_closed_loop("127.0.0.1", port, ROUTE, bodies, clients, WARMUP_S,
                                                           args.duration))  # fmt: skip
                requests = sum(tally.statuses.values())
                inside = batch_figures(counters, batch_counters(port, "sst2"), servers.session_cpu_seconds(server.pid)
                                       - cpu, requests)  # fmt: skip
                rows = inside["rows_per_batch"] or 0.0
                latencies = [latency for latency, end in zip(tally.admitted_latencies, tally.admitted_finished,
                                                             strict=True) if end > started + WARMUP_S]  # fmt: skip
                p50 = percentile(latencies, 0.5)
                points.append({
                    "transport": "served", "processes": processes, "switch_interval_ms": interval,
                    "concurrency": clients,
                    "sequences_per_s": round(rate or 0.0, 1), "rows_per_batch": rows,
                    "worker_ms_per_batch": inside["run_ms_per_batch"] or 0.0,
                    "device_ms_per_batch": round(args.device_ms + args.row_ms * rows, 3),
                    "cpu_ms_per_request": inside["server_cpu_ms_per_request"] or 0.0,
                    "p50_ms": None if p50 is None else round(1000 * p50, 3),
                })  # fmt: skip
                log.info("%s", points[-1])
    return points


def medians(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (transport, processes, switch interval, concurrency): the medians over rounds."""
    grouped: dict[tuple[str, int, float, int], list[dict[str, Any]]] = {}
    for point in points:
        key = (point["transport"], point.get("processes", 1), point["switch_interval_ms"], point["concurrency"])
        grouped.setdefault(key, []).append(point)
    rows = []
    for key in sorted(grouped, key=lambda group: (group[0], group[1], -group[2], group[3])):
        transport, processes, interval, clients = key
        found = grouped[key]
        row: dict[str, Any] = {"transport": transport, "processes": processes, "switch_interval_ms": interval,
                               "concurrency": clients, "rounds": len(found)}  # fmt: skip
        for figure in ("sequences_per_s", "rows_per_batch", "worker_ms_per_batch", "device_ms_per_batch",
                       "cpu_ms_per_request"):  # fmt: skip
            row[figure] = statistics.median(point[figure] for point in found)
        p50s = [point["p50_ms"] for point in found if point.get("p50_ms") is not None]
        row["p50_ms"] = statistics.median(p50s) if p50s else None
        rows.append(row)
    return rows


def markdown(report: dict[str, Any]) -> str:
    batching = {**GPU_BATCHING, "parallel_runs": report["parallel_runs"]}
    lines = [
        "# A batch's time in the service beyond its device time (benchmarks.studies.gil_handoff)",
        "",
        f"Tree {report['tree']}; bundle `{report['bundle']}` for its tokenizer and task; the device: a sleep of "
        f"{report['device_ms']} ms + {report['row_ms']} ms a row with the GIL released; batching as the H200 tuned "
        f"it for MiniLM SST-2 (`{json.dumps(batching)}`); {report['rounds']} rounds, {report['duration_s']:g} s a "
        f"point, medians; {report['cpu_count']} CPUs; load average at start {report['load_avg']['start']}, at end "
        f"{report['load_avg']['end']}.",
        "",
        "| transport | processes | switch interval | c | seq/s | rows/batch | worker ms/batch | device ms/batch "
        "| worker - device | seq/s if a batch took its device time | CPU ms/request | p50 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in report["medians"]:
        device, processes = row["device_ms_per_batch"], row.get("processes", 1)
        ideal = row["rows_per_batch"] * report["parallel_runs"] * processes / device * 1000 if device else None
        p50 = row.get("p50_ms")
        lines.append(
            f"| {row['transport']} | {processes} | {row['switch_interval_ms']:g} ms | {row['concurrency']} "
            f"| {row['sequences_per_s']:,.1f} "
            f"| {row['rows_per_batch']:.1f} | {row['worker_ms_per_batch']:.2f} | {device:.2f} "
            f"| {row['worker_ms_per_batch'] - device:+.2f} | {'-' if ideal is None else f'{ideal:,.0f}'} "
            f"| {row['cpu_ms_per_request']:.2f} | {'-' if p50 is None else f'{p50:.2f}'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.gil_handoff", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bundle", type=Path, required=True, help="a text-classification bundle (its tokenizer)")
    parser.add_argument("--device-ms", type=float, default=1.0)
    parser.add_argument("--row-ms", type=float, default=0.008)
    parser.add_argument("--intervals", type=lambda t: [float(v) for v in t.split(",")], default=[5.0, 1.0, 0.2],
                        help="switch intervals in ms (sys.setswitchinterval; Python's default is 5)")  # fmt: skip
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[1, 32, 128])
    parser.add_argument("--parallel-runs", type=int, default=2, help="workers running a batch at once (of two)")
    parser.add_argument("--processes", type=lambda t: [int(c) for c in t.split(",")], default=[1],
                        help="serving processes of the served transport (python -m service --processes)")  # fmt: skip
    parser.add_argument("--transports", type=lambda t: t.split(","), default=["core", "served"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--out", type=Path, help="report prefix (.json and .md)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-interval", type=float, default=5.0, help=argparse.SUPPRESS)
    parser.add_argument("--serve-processes", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.serve:
        return serve(args)
    load_start = [round(value, 2) for value in os.getloadavg()]
    points: list[dict[str, Any]] = []
    for number in range(args.rounds):  # rounds interleave the transports, in turn first
        for transport in args.transports if number % 2 == 0 else args.transports[::-1]:
            found = asyncio.run(measure_core(args)) if transport == "core" else measure_served(args)
            points += [{**point, "round": number} for point in found]
    report = {
        "tree": tree_commit(), "bundle": args.bundle.name, "device_ms": args.device_ms, "row_ms": args.row_ms,
        "parallel_runs": args.parallel_runs, "rounds": args.rounds, "duration_s": args.duration,
        "cpu_count": os.cpu_count(), "medians": medians(points), "points": points,
        "load_avg": {"start": load_start, "end": [round(value, 2) for value in os.getloadavg()]},
    }  # fmt: skip
    text = markdown(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
