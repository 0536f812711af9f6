"""What gRPC saves per request: the Open Inference Protocol over gRPC against REST v2 and v1, side by side.

One server (``python -m service --grpc-port``) per bundle; one sentence per request (the SST-2 dev sentence of median
length, the same bytes on every request and protocol); one load generator for all three, nghttp2's ``h2load`` (C,
light on the client's CPU; ``apt-get install nghttp2-client``): HTTP/1.1 with keep-alive for REST, HTTP/2 for gRPC,
``c`` connections with one request in flight each. ``ghz`` and ``grpcurl`` are not packaged by Debian; h2load speaks
gRPC's framing given the message bytes. The protocols take turns at each concurrency, ``--rounds`` times; each
figure is the median over the rounds.

Per point: requests/s, p50 and p99 (from h2load's per-request log), server CPU ms per request (every thread of the
server's process), and the answers' success: HTTP 200 for REST; for gRPC the server's own count of ``OK`` calls
(``bertserve_requests_total``), since a gRPC failure is an HTTP 200 with a ``grpc-status`` trailer.

    python -m benchmarks.grpc_speed --model fp32=benchmarks/scratch/ab-sst2-fp32 \\
        --model int8=benchmarks/scratch/ab-sst2-int8 --out benchmarks/results/grpc
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import load_inputs
from benchmarks.report import finish_load_report, load_parser, page, table

log = logging.getLogger("benchmarks.grpc_speed")
LOG_DIR = SCRATCH_DIR / "grpc-logs"
INFER = "/inference.GRPCInferenceService/ModelInfer"
PROTOCOLS = ("v1", "v2", "grpc")


def median_sentence() -> str:
    sentences = sorted(load_inputs("sst2"), key=len)
    return sentences[len(sentences) // 2]


def grpc_frame(model: str, text: str) -> bytes:
    """A ModelInferRequest as tritonclient.grpc sends it (raw BYTES contents), in gRPC's length-prefixed frame."""
    from service.grpc.protocol import MESSAGES

    request = MESSAGES["ModelInferRequest"](model_name=model)
    request.inputs.add(name="text", datatype="BYTES", shape=[1])
    encoded = text.encode()
    request.raw_input_contents.append(struct.pack("<I", len(encoded)) + encoded)
    message = request.SerializeToString()
    return b"\x00" + struct.pack(">I", len(message)) + message


def bodies(model: str, text: str, folder: Path) -> dict[str, tuple[str, Path, list[str]]]:
    """Protocol -> (path, body file, h2load options)."""
    folder.mkdir(parents=True, exist_ok=True)
    v2 = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}]}
    payloads = {
        "v1": ("/v1/text-classification", json.dumps({"model": model, "inputs": text}).encode()),
        "v2": (f"/v2/models/{model}/infer", json.dumps(v2).encode()),
        "grpc": (INFER, grpc_frame(model, text)),
    }
    json_options = ["--h1", "-H", "content-type: application/json"]
    grpc_options = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    made = {}
    for protocol, (path, payload) in payloads.items():
        body = folder / f"{model}-{protocol}.body"
        body.write_bytes(payload)
        made[protocol] = (path, body, grpc_options if protocol == "grpc" else json_options)
    return made


def h2load(
    url: str, body: Path, options: list[str], concurrency: int, duration_s: float, warmup_s: float
) -> dict[str, Any]:
    h2load_path = shutil.which("h2load")
    if h2load_path is None:
        raise RuntimeError("h2load is not installed: apt-get install nghttp2-client")
    log_file = LOG_DIR / f"h2load-{os.getpid()}-{time.monotonic_ns()}.tsv"  # h2load appends to an existing file
    command = [h2load_path, "-c", str(concurrency), "-m", "1", "-t", "1", "-D", f"{duration_s:g}",
               f"--warm-up-time={warmup_s:g}", "-d", str(body), f"--log-file={log_file}", *options, url]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    done = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed", output)
    rate = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", output)
    if done is None or rate is None:
        raise RuntimeError(f"h2load output not understood:\n{output}")
    latencies = sorted(int(line.split("\t")[2]) / 1000 for line in log_file.read_text().splitlines() if line)
    log_file.unlink()
    return {
        "requests": int(done.group(3)), "succeeded": int(done.group(4)), "failed": int(done.group(5)),
        "requests_per_s": float(rate.group(2)),
        "p50_ms": latencies[len(latencies) // 2] if latencies else None,
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None,
    }  # fmt: skip


def grpc_ok_calls(base_url: str) -> float:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf'bertserve_requests_total\{{route="{re.escape(INFER)}",status="OK"\}} ([\d.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def measure(args: argparse.Namespace, name: str, bundle: Path, text: str) -> list[dict[str, Any]]:
    port, grpc_port = servers.free_port(), servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--grpc-port", str(grpc_port), "--host",
               "127.0.0.1", "--log-level", "warning", "--model", f"{name}={bundle}"]  # fmt: skip
    made = bodies(name, text, LOG_DIR)
    points: list[dict[str, Any]] = []
    with servers.running(f"grpc-{name}", command, port, "/health/ready", LOG_DIR) as server:
        urls = {protocol: f"http://127.0.0.1:{grpc_port if protocol == 'grpc' else port}{made[protocol][0]}"
                for protocol in PROTOCOLS}  # fmt: skip
        for concurrency in args.concurrency:
            rounds: dict[str, list[dict[str, Any]]] = {protocol: [] for protocol in PROTOCOLS}
            for _ in range(args.rounds):
                for protocol in PROTOCOLS:
                    _, body, options = made[protocol]
                    ok_before, cpu_before = grpc_ok_calls(server.base_url), server.cpu_seconds()
                    result = h2load(urls[protocol], body, options, concurrency, args.duration, args.warmup)
                    cpu = server.cpu_seconds() - cpu_before
                    ok = grpc_ok_calls(server.base_url) - ok_before
                    served = args.warmup + args.duration
                    result["cpu_ms_per_request"] = round(1000 * cpu / max(1.0, result["requests_per_s"] * served), 3)
                    if protocol == "grpc":
                        result["grpc_ok_share"] = round(ok / max(1, result["succeeded"]), 3)
                    rounds[protocol].append(result)
                    log.info("%s %s c=%d: %.1f req/s, p50 %.2f ms", name, protocol, concurrency,
                             result["requests_per_s"], result["p50_ms"] or -1)  # fmt: skip
            for protocol, results in rounds.items():
                point = {"model": name, "protocol": protocol, "concurrency": concurrency, "rounds": len(results)}
                for key in ("requests_per_s", "p50_ms", "p99_ms", "cpu_ms_per_request"):
                    point[key] = round(statistics.median(result[key] for result in results), 3)
                point["failed"] = sum(result["failed"] for result in results)
                if protocol == "grpc":
                    point["grpc_ok_share"] = min(result["grpc_ok_share"] for result in results)
                points.append(point)
    return points


def markdown(report: dict[str, Any]) -> str:
    by_key = {(p["model"], p["concurrency"], p["protocol"]): p for p in report["points"]}
    rows = []
    for point in report["points"]:
        v2 = by_key[(point["model"], point["concurrency"], "v2")]["requests_per_s"]
        v1 = by_key[(point["model"], point["concurrency"], "v1")]["requests_per_s"]
        failed = point["failed"]
        if point["protocol"] == "grpc" and point.get("grpc_ok_share", 1.0) < 1.0:
            failed = f"{failed} (OK share {point['grpc_ok_share']})"
        rows.append((
            point["model"], point["concurrency"], point["protocol"], f"{point['requests_per_s']:.1f}",
            f"{point['p50_ms']:.2f}", f"{point['p99_ms']:.2f}", f"{point['cpu_ms_per_request']:.2f}", failed,
            f"{point['requests_per_s'] / v2:.2f}x", f"{point['requests_per_s'] / v1:.2f}x",
        ))  # fmt: skip
    columns = ("model", "c:", "protocol", "req/s:", "p50 ms:", "p99 ms:", "server CPU ms/req:", "failed:",
               "vs v2 req/s:", "vs v1 req/s:")  # fmt: skip
    return page(
        "The Open Inference Protocol over gRPC against REST v2 and v1",
        f"Tree {report['tree']}; one sentence per request ({report['sentence_chars']} characters, SST-2 dev median); "
        f"h2load, c connections x 1 in flight; {report['rounds']} rounds x {report['duration_s']:g} s per point "
        f"(median); load average at start {report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        table(columns, rows),
    )


def main(argv: list[str] | None = None) -> int:
    parser = load_parser(__doc__, rounds=2, models="an SST-2 classifier")
    parser.add_argument("--concurrency", default="1,32,128", type=lambda text: [int(c) for c in text.split(",")])
    args = parser.parse_args(argv)
    text = median_sentence()
    at_start = os.getloadavg()
    points = []
    for spec in args.model:
        name, _, path = spec.partition("=")
        points += measure(args, name, Path(path), text)
    return finish_load_report(args, at_start, markdown, sentence_chars=len(text), points=points)


if __name__ == "__main__":
    raise SystemExit(main())
