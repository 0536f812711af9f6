"""More than one serving process on one GPU (``benchmarks.gpu``'s step after its server): does the card serve more?

``benchmarks.studies.gil_handoff`` found one Python process's CPU per request to be the ceiling when the device is
fast (2 cores, a stand-in device: ~2,400-2,700 one-input requests/s where the device time allowed ~35,000), and the
H200's server saturated at 400-1,600 requests/s while the GPU idled. ``python -m service --processes N`` serves from
N processes on one port, each with its own CUDA context and copy of the models. For each of ``--processes``' counts
n, this starts that server (``--device cuda``, the SST-2 and BERT-base fp16 bundles; ready once every process
serves), then n client processes, each a closed loop of c=128 / n one-input requests on the one port, on SST-2
sentences and on 128-token pieces. The figure is their summed sequences/s beside the one-process c=128 point of the
same run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from benchmarks import servers
from benchmarks.overload_client import closed_loop

log = logging.getLogger("benchmarks.gpu_processes")
ROUTE = "/v1/text-classification"
TOTAL_CLIENTS = 128


def client_rate(port: int, bodies: list[bytes], clients: int, warmup_s: float, seconds: float) -> tuple[float, int]:
    """One client process's closed loop on one server: (answers/s, answered)."""
    rate, tally = asyncio.run(closed_loop("127.0.0.1", port, ROUTE, bodies, clients, warmup_s, seconds, 60.0))
    return rate or 0.0, tally.statuses["200"]


def server_command(models: dict[str, Path], port: int, device: str, processes: int) -> list[str]:
    return [*servers.bertserve_command(models, port), "--device", device, "--host", "127.0.0.1", "--log-level",
            "warning", "--max-concurrent-requests", "512", "--processes", str(processes)]  # fmt: skip


def measure(
    models: dict[str, Path], loads: dict[str, tuple[str, list[str]]], counts: list[int], device: str,
    warmup_s: float, seconds: float, log_dir: Path,
) -> dict[str, Any]:  # fmt: skip
    """Per process count n and workload: the server's sequences/s under n client processes, summed."""
    found: dict[str, Any] = {"total_clients": TOTAL_CLIENTS, "counts": {}}
    with ProcessPoolExecutor(max(counts), mp_context=get_context("spawn")) as pool:
        for count in counts:
            port = servers.free_port()
            command = server_command(models, port, device, count)
            with servers.running(f"bertserve-processes-{count}", command, port, "/health/ready", log_dir):
                clients = max(1, TOTAL_CLIENTS // count)
                points: dict[str, Any] = {}
                for name, (model, texts) in loads.items():
                    bodies = [
                        json.dumps({"model": model, "inputs": text, "truncation": True}).encode() for text in texts
                    ]
                    jobs = [pool.submit(client_rate, port, bodies, clients, warmup_s, seconds) for _ in range(count)]
                    rates = [job.result() for job in jobs]
                    points[name] = {
                        "sequences_per_s": round(sum(rate for rate, _ in rates), 1),
                        "per_client": [round(rate, 1) for rate, _ in rates], "clients_each": clients,
                    }  # fmt: skip
                    log.info("%d processes, %s: %s", count, name, points[name])
            found["counts"][str(count)] = points
    return found


def markdown_lines(results: dict[str, Any]) -> list[str]:
    """The report's section: summed sequences/s per server count, beside the one server's c=128 point."""
    found, served = results.get("processes"), results.get("served", {})
    if not found or not found.get("counts"):
        return []
    names = sorted({name for points in found["counts"].values() for name in points})
    lines = ["## More than one serving process on the card (benchmarks.gpu_processes)", "",
             f"`python -m service --processes N`; c={found['total_clients']} in all, split evenly over N client "
             "processes on its one port; sequences/s summed (per client process in brackets).", "",
             "| workload | one process, c=128 | " + " | ".join(f"{count} processes" for count in found["counts"])
             + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in found["counts"]) + " |"]  # fmt: skip
    for name in names:
        one = served.get(name, {}).get("c128", {}).get("sequences_per_s")
        cells = []
        for points in found["counts"].values():
            point = points.get(name)
            if point is None:
                cells.append("-")
                continue
            each = ", ".join(f"{rate:,.0f}" for rate in point["per_client"])
            cells.append(f"{point['sequences_per_s']:,.1f} ({each})")
        lines.append(f"| {name} | {'-' if one is None else f'{one:,.1f}'} | " + " | ".join(cells) + " |")
    return [*lines, ""]
