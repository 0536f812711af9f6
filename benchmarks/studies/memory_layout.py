"""What a second model costs in memory: serve a bundle under one name, then the same bundle under two, and compare.

The RSS a second copy adds is the model's own footprint (sessions, arena, tokenizer), without the interpreter and
libraries every server carries. Measured at ready and after a burst of long requests to every name (the burst grows
ONNX Runtime's activation arena). Target of issue 21: <= 1.3x the ONNX file at ready, <= 1.4x after the burst.

    python -m benchmarks.studies.memory_layout BUNDLE [BUNDLE ...] [--server-args "--parallel-runs 2"]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from benchmarks.overload_client import rss_bytes
from benchmarks.servers import bertserve_command, free_port, running

log = logging.getLogger("benchmarks.studies.memory_layout")

RESULTS = Path(__file__).parents[1] / "results"  # benchmarks/results
TEXT = "the film was long but the actors kept it alive and the music carried every scene to its end"
WORDS = TEXT.split(" ")


def burst(url: str, names: list[str], requests: int, concurrency: int, words: int) -> dict[int, int]:
    """``requests`` classification requests per name, ``words`` words each, ``concurrency`` at a time."""
    text = " ".join(WORDS[k % len(WORDS)] for k in range(words))
    statuses: dict[int, int] = {}
    with httpx.Client(base_url=url, timeout=120) as client:

        def send(k: int) -> int:
            body = {"model": names[k % len(names)], "inputs": [text] * 8}
            return client.post("/v1/text-classification", json=body).status_code

        with ThreadPoolExecutor(concurrency) as pool:
            for status in pool.map(send, range(requests * len(names))):
                statuses[status] = statuses.get(status, 0) + 1
    return statuses


def measure(bundle: Path, names: list[str], server_args: list[str], log_dir: Path) -> dict[str, Any]:
    port = free_port()
    command = bertserve_command({name: bundle for name in names}, port) + server_args
    started = time.perf_counter()
    with running(f"memory-{bundle.name}-{len(names)}", command, port, "/health/ready", log_dir) as server:
        ready_s = time.perf_counter() - started
        time.sleep(1.0)
        at_ready = rss_bytes(server.pid)
        statuses = burst(server.base_url, names, requests=48, concurrency=16, words=110)
        time.sleep(1.0)
        after = rss_bytes(server.pid)
    return {"models": len(names), "ready_s": ready_s, "rss_ready": at_ready, "rss_after_burst": after,
            "statuses": statuses}  # fmt: skip


def layout_row(bundle: Path, server_args: list[str], log_dir: Path) -> dict[str, Any]:
    one = measure(bundle, ["a"], server_args, log_dir)
    two = measure(bundle, ["a", "b"], server_args, log_dir)
    size = (bundle / "model.onnx").stat().st_size
    added_ready = two["rss_ready"] - one["rss_ready"]
    added_after = two["rss_after_burst"] - one["rss_after_burst"]
    return {
        "bundle": bundle.name,
        "onnx_bytes": size,
        "one": one,
        "two": two,
        "added_ready_bytes": added_ready,
        "added_after_burst_bytes": added_after,
        "added_ready_x_file": added_ready / size,
        "added_after_burst_x_file": added_after / size,
    }


def markdown(rows: list[dict[str, Any]], server_args: list[str], loads: tuple[float, float]) -> str:
    mb = 1 << 20
    lines = [
        "# Memory: what a second model adds",
        "",
        f"`python -m benchmarks.studies.memory_layout` with server args `{shlex.join(server_args) or '(defaults)'}`; "
        f"load average {loads[0]:.2f} at start, {loads[1]:.2f} at end. The burst: 48 requests of 8 texts of 110 "
        "words per model name, 16 at a time. Targets: <= 1.3x the file at ready, <= 1.4x after the burst.",
        "",
        "| bundle | ONNX MB | RSS one model, ready / after MB | RSS two, ready / after MB | added at ready MB (x file) "
        "| added after burst MB (x file) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        one, two = row["one"], row["two"]
        lines.append(
            f"| {row['bundle']} | {row['onnx_bytes'] / mb:.0f} | {one['rss_ready'] / mb:.0f} / "
            f"{one['rss_after_burst'] / mb:.0f} | {two['rss_ready'] / mb:.0f} / {two['rss_after_burst'] / mb:.0f} | "
            f"{row['added_ready_bytes'] / mb:.0f} ({row['added_ready_x_file']:.2f}x) | "
            f"{row['added_after_burst_bytes'] / mb:.0f} ({row['added_after_burst_x_file']:.2f}x) |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundles", nargs="+", type=Path)
    parser.add_argument("--server-args", default="", help="extra flags for python -m service")
    parser.add_argument("--out", type=Path, default=RESULTS / "memory_layout")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    server_args = shlex.split(args.server_args)
    start_load = os.getloadavg()[0]
    log_dir = Path(__file__).parents[1] / "scratch" / "memory-logs"
    rows = [layout_row(bundle, server_args, log_dir) for bundle in args.bundles]
    loads = (start_load, os.getloadavg()[0])
    report = {"server_args": server_args, "load_average": loads, "rows": rows}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(rows, server_args, loads))
    log.info("\n%s", markdown(rows, server_args, loads))


if __name__ == "__main__":
    main()
