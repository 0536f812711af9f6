"""``python -m benchmarks.triton_perf``: the service measured by Triton's own load tool, ``perf_analyzer``.

Platform teams measure a Triton or KServe server with perf_analyzer; it reads the model's configuration and its
statistics (the extensions the service answers) and reports the client's view beside the server's. One server
(``python -m service --grpc-port``) per bundle; perf_analyzer sends one SST-2 sentence a request (the dev set's
median, as ``benchmarks.grpc_speed``) over gRPC calls (``grpc``), one gRPC stream (``grpc-stream``,
``ModelStreamInfer``) and REST v2 (``http``), the modes taking turns at each concurrency, ``--rounds`` times; each
figure is the median over the rounds. Per point: inferences/s, p50 and p99 (perf_analyzer's), the server's queue and
model time per request (its statistics), and the server's CPU per request (every thread of its process).

``--modes`` adds Triton's system shared memory (``grpc-shm``, ``http-shm``: perf_analyzer ``--shared-memory system``,
inputs and outputs in /dev/shm objects, the server started with ``--allow-client-shm``; perf_analyzer takes it only
for models without optional inputs, such as an embedding model); ``--items N`` sends N sentences a request.

perf_analyzer comes in tritonclient's wheel (``.venv/bin/perf_analyzer``); it links ``libcudart.so.12`` (the
``nvidia-cuda-runtime-cu12`` wheel, in the ``bench`` extra; no GPU is used) and ``libb64.so.0d``
(``apt-get install libb64-0d``).

    python -m benchmarks.triton_perf --model int8=benchmarks/scratch/sst2-int8 --out benchmarks/results/triton_perf
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.grpc_speed import median_sentence
from benchmarks.report import finish_load_report, load_parser, page, table

log = logging.getLogger("benchmarks.triton_perf")
LOG_DIR = SCRATCH_DIR / "triton-perf-logs"
SHARED_MEMORY = ["--shared-memory", "system", "--output-shared-memory-size", str(1 << 20)]
MODES = {
    "grpc": ["-i", "grpc"],
    "grpc-stream": ["-i", "grpc", "--streaming"],
    "http": ["-i", "http"],
    "grpc-shm": ["-i", "grpc", *SHARED_MEMORY],
    "http-shm": ["-i", "http", *SHARED_MEMORY],
}
DEFAULT_MODES = ("grpc", "grpc-stream", "http")


def perf_analyzer() -> tuple[str, dict[str, str]]:
    """perf_analyzer's path and the environment it runs in (libcudart's folder on the library path)."""
    found = shutil.which("perf_analyzer") or str(Path(sys.executable).with_name("perf_analyzer"))
    if not Path(found).exists():
        raise RuntimeError("perf_analyzer not found: it comes with tritonclient's wheel (pip install tritonclient)")
    spec = importlib.util.find_spec("nvidia.cuda_runtime")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("libcudart.so.12 not found: pip install nvidia-cuda-runtime-cu12 (the bench extra)")
    libraries = str(Path(next(iter(spec.submodule_search_locations))) / "lib")
    env = dict(
        os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [libraries, os.environ.get("LD_LIBRARY_PATH")]))
    )
    probe = subprocess.run([found, "--version"], capture_output=True, text=True, env=env, check=False)
    if "error while loading shared libraries" in probe.stderr:
        raise RuntimeError(f"perf_analyzer cannot start: {probe.stderr.strip()} (libb64: apt-get install libb64-0d)")
    return found, env


def model_statistics(base_url: str, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url}/v2/models/{model}/stats", timeout=10) as response:
        stats: dict[str, Any] = json.loads(response.read())["model_stats"][0]
    return stats


def run_point(
    tool: tuple[str, dict[str, str]],
    url: str,
    mode: str,
    model: str,
    data: Path,
    concurrency: int,
    seconds: float,
    items: int = 1,
) -> dict[str, Any]:
    """One perf_analyzer measurement (three windows of ``seconds``): its CSV row's figures."""
    binary, env = tool
    out = LOG_DIR / f"{model}-{mode}-c{concurrency}.csv"
    command = [binary, "-m", model, "-u", url, *MODES[mode], "--input-data", str(data), "--shape", f"text:{items}",
               "--concurrency-range", str(concurrency), "--measurement-interval", str(int(1000 * seconds)),
               "--max-trials", "3", "--stability-percentage", "999", "-f", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=30 * seconds + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    with out.open(newline="") as handle:
        row = next(csv.DictReader(handle))
    return {
        "inferences_per_s": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1000,
        "p99_ms": float(row["p99 latency"]) / 1000,
    }


def measure(
    args: argparse.Namespace, tool: tuple[str, dict[str, str]], name: str, bundle: Path, data: Path
) -> list[dict[str, Any]]:
    port, grpc_port = servers.free_port(), servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--grpc-port", str(grpc_port), "--host",
               "127.0.0.1", "--log-level", "warning", "--model", f"{name}={bundle}"]  # fmt: skip
    if any(mode.endswith("-shm") for mode in args.modes):
        command.append("--allow-client-shm")
    urls = {mode: f"127.0.0.1:{port if mode.startswith('http') else grpc_port}" for mode in MODES}
    points: list[dict[str, Any]] = []
    with servers.running(f"triton-perf-{name}", command, port, "/health/ready", LOG_DIR) as server:
        for concurrency in args.concurrency:
            rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in args.modes}
            for _ in range(args.rounds):
                for mode in args.modes:
                    before, cpu_before = model_statistics(server.base_url, name), server.cpu_seconds()
                    result = run_point(tool, urls[mode], mode, name, data, concurrency, args.duration, args.items)
                    cpu = server.cpu_seconds() - cpu_before
                    after = model_statistics(server.base_url, name)
                    done = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
                    for stage in ("queue", "compute_infer"):
                        spent = after["inference_stats"][stage]["ns"] - before["inference_stats"][stage]["ns"]
                        result[f"server_{stage}_ms"] = round(spent / 1e6 / max(1, done), 3)
                    result["cpu_ms_per_request"] = round(1000 * cpu / max(1, done), 3)
                    rounds[mode].append(result)
                    log.info("%s %s c=%d: %s", name, mode, concurrency, result)
            for mode, results in rounds.items():
                point: dict[str, Any] = {"model": name, "mode": mode, "concurrency": concurrency}
                for key in results[0]:
                    point[key] = round(statistics.median(result[key] for result in results), 3)
                points.append(point)
    return points


def markdown(report: dict[str, Any]) -> str:
    by_key = {(p["model"], p["concurrency"], p["mode"]): p for p in report["points"]}
    rows = []
    for point in report["points"]:
        calls = by_key[(point["model"], point["concurrency"], "grpc")]["inferences_per_s"]
        rows.append((
            point["model"], point["concurrency"], point["mode"], f"{point['inferences_per_s']:.1f}",
            f"{point['p50_ms']:.2f}", f"{point['p99_ms']:.2f}", f"{point['server_queue_ms']:.2f}",
            f"{point['server_compute_infer_ms']:.2f}", f"{point['cpu_ms_per_request']:.2f}",
            f"{point['inferences_per_s'] / calls:.2f}x",
        ))  # fmt: skip
    columns = ("model", "c:", "mode", "inferences/s:", "p50 ms:", "p99 ms:", "server queue ms:",
               "server model ms:", "server CPU ms/req:", "vs gRPC calls:")  # fmt: skip
    return page(
        "The service under Triton's perf_analyzer",
        f"Tree {report['tree']}; perf_analyzer {report['perf_analyzer']}; {report.get('items', 1)} sentence(s) per "
        f"request ({report['sentence_chars']} characters each, SST-2 dev median); c requests in flight; "
        f"{report['rounds']} rounds, "
        f"three {report['duration_s']:g} s windows per point (median); load average at start "
        f"{report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        table(columns, rows),
    )


def main(argv: list[str] | None = None) -> int:
    parser = load_parser(__doc__, rounds=2, duration_s=3.0, models="an SST-2 classifier")
    parser.add_argument("--concurrency", default="1,32", type=lambda text: [int(c) for c in text.split(",")])
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES), type=lambda text: text.split(","),
                        help=f"of {', '.join(MODES)}; grpc first (the others are compared with it)")  # fmt: skip
    parser.add_argument("--items", type=int, default=1, help="sentences per request (the text tensor's shape)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown or "grpc" not in args.modes:
        parser.error(f"--modes: give grpc and any of {', '.join(MODES)} (not {', '.join(unknown) or 'without grpc'})")
    tool = perf_analyzer()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    text = median_sentence()
    data = LOG_DIR / "input.json"
    data.write_text(json.dumps({"data": [{"text": [text] * args.items}]}))
    version = subprocess.run([tool[0], "--version"], capture_output=True, text=True, env=tool[1], check=False)
    at_start = os.getloadavg()
    points = []
    for spec in args.model:
        name, _, path = spec.partition("=")
        points += measure(args, tool, name, Path(path), data)
    said = (version.stdout + version.stderr).strip()  # "Perf Analyzer Version 2.41.0 (commit ...)"
    named = said.splitlines()[-1] if said else "(no --version line)"
    return finish_load_report(args, at_start, markdown, sentence_chars=len(text), points=points, perf_analyzer=named,
                              items=args.items)  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
