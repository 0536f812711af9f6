"""What tracing costs: the same server and load with tracing off, sampled at 100 % and at 1 %, interleaved.

Each configuration is a fresh server (``python -m service``, the configuration is its environment) under wrk at one
concurrency, one SST-2 dev sentence per request on ``/v1/text-classification``; the configurations take turns,
``--rounds`` times, and each figure is the median. Spans go over OTLP/HTTP to a sink on this machine that reads and
drops them (a collector would run elsewhere: the sink's CPU is counted against tracing here, the worst case).

    python -m benchmarks.tracing_cost --model sst2=benchmarks/scratch/ab-sst2-fp32 --out benchmarks/results/tracing
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import loadgen, servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import bertserve_loads
from benchmarks.report import finish_load_report, load_parser, page, table

log = logging.getLogger("benchmarks.tracing_cost")
LOG_DIR = SCRATCH_DIR / "tracing-logs"
SINK = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""
CONFIGURATIONS: dict[str, dict[str, str]] = {
    "off": {},
    "sampled 100 %": {"OTEL_TRACES_SAMPLER": "always_on"},
    "sampled 1 %": {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
}


def measure(args: argparse.Namespace, name: str, bundle: Path, sink_port: int) -> list[dict[str, Any]]:
    bodies = loadgen.write_bodies(bertserve_loads("sst2", name)[0].bodies, LOG_DIR / "bodies.jsonl")
    results: dict[str, list[float]] = {label: [] for label in CONFIGURATIONS}
    for _ in range(args.rounds):
        for label, extra in CONFIGURATIONS.items():
            env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
            if extra:
                env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}", **extra}
            port = servers.free_port()
            command = [sys.executable, "-m", "service", "--port", str(port), "--log-level", "warning",
                       "--model", f"{name}={bundle}"]  # fmt: skip
            with servers.running(f"tracing-{name}", command, port, "/health/ready", LOG_DIR, env=env) as server:
                url = f"{server.base_url}/v1/text-classification"
                loadgen.run_wrk(url, bodies, args.concurrency, args.warmup)
                result = loadgen.run_wrk(url, bodies, args.concurrency, args.duration)
            results[label].append(result.sequences_per_s)
            log.info("%s %s: %.1f req/s", name, label, result.sequences_per_s)
    off = statistics.median(results["off"])
    return [
        {"model": name, "configuration": label, "concurrency": args.concurrency,
         "requests_per_s": round(statistics.median(values), 2), "rounds": [round(v, 1) for v in values],
         "vs_off": round(statistics.median(values) / off, 3)}
        for label, values in results.items()
    ]  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    rows = [
        (point["model"], point["configuration"], f"{point['requests_per_s']:.1f}", f"{point['vs_off']:.3f}x",
         ", ".join(f"{value:.1f}" for value in point["rounds"]))
        for point in report["points"]
    ]  # fmt: skip
    return page(
        "What tracing costs (OpenTelemetry, OTLP/HTTP to a local sink)",
        f"Tree {report['tree']}; wrk c={report['concurrency']}, one SST-2 dev sentence per request, "
        f"{report['rounds']} rounds x {report['duration_s']:g} s per configuration, interleaved (median); load "
        f"average at start {report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        table(("model", "tracing", "req/s:", "vs off:", "rounds"), rows),
    )


def main(argv: list[str] | None = None) -> int:
    parser = load_parser(__doc__, rounds=3, models="an SST-2 classifier")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    at_start = os.getloadavg()
    sink_port = servers.free_port()
    sink = subprocess.Popen([sys.executable, "-c", SINK, str(sink_port)])
    try:
        points = []
        for spec in args.model:
            name, _, path = spec.partition("=")
            points += measure(args, name, Path(path), sink_port)
    finally:
        sink.terminate()
        sink.wait(timeout=10)
    return finish_load_report(args, at_start, markdown, concurrency=args.concurrency, points=points)


if __name__ == "__main__":
    raise SystemExit(main())
