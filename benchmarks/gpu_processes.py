"""More than one serving process on one GPU (``benchmarks.gpu``'s step after its server): does the card serve more?

``benchmarks.studies.gil_handoff`` found one Python process's CPU per request to be the ceiling when the device is
fast (2 cores, a stand-in device: ~2,700 one-input requests/s where the device time allowed ~38,000), and the H200's
server saturated at 400-1,600 requests/s while the GPU idled. The product serves from one process; before it grows
more, this measures what they would give on the card: ``--processes`` independent ``python -m service`` servers
(``--device cuda``, the SST-2 and BERT-base fp16 bundles, each its own CUDA context, all started at once, so they
tune and warm up side by side as the processes of one pod would), then one client process per server, each a closed
loop of c=128 / n one-input requests, for n = each of ``--processes``' counts (the first n servers), on SST-2
sentences and on 128-token pieces. The figure is the servers' summed sequences/s beside the one-server c=128 point
of the same run. What it leaves out, a real multi-process server would have to settle: one /metrics, one model
repository, one batch runner, the card's memory shared by the processes' tuning.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
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


def start_all(stack: ExitStack, managers: Sequence[AbstractContextManager[Any]]) -> None:
    """Enter every server's context at once (they tune and warm up side by side, as processes of one pod would);
    each one that started is stopped with ``stack``, and the first failure is raised once all have tried."""
    with ThreadPoolExecutor(len(managers)) as starter:
        futures = [starter.submit(manager.__enter__) for manager in managers]
    failures = []
    for manager, future in zip(managers, futures, strict=True):
        if future.exception() is not None:
            failures.append(future.exception())
        else:
            stack.push(manager.__exit__)
    if failures:
        raise failures[0]  # type: ignore[misc]


def server_command(models: dict[str, Path], port: int, device: str) -> list[str]:
    return [*servers.bertserve_command(models, port), "--device", device, "--host", "127.0.0.1", "--log-level",
            "warning", "--max-concurrent-requests", "512"]  # fmt: skip


def measure(
    models: dict[str, Path], loads: dict[str, tuple[str, list[str]]], counts: list[int], device: str,
    warmup_s: float, seconds: float, log_dir: Path,
) -> dict[str, Any]:  # fmt: skip
    """Per server count n and workload: the n servers' summed sequences/s, each loaded by its own client process."""
    found: dict[str, Any] = {"total_clients": TOTAL_CLIENTS, "counts": {}}
    ports = [servers.free_port() for _ in range(max(counts))]
    with ExitStack() as stack:
        start_all(stack, [servers.running(f"bertserve-process-{number}", server_command(models, port, device), port,
                                          "/health/ready", log_dir) for number, port in enumerate(ports)])  # fmt: skip
        with ProcessPoolExecutor(max(counts), mp_context=get_context("spawn")) as pool:
            for count in counts:
                clients = max(1, TOTAL_CLIENTS // count)
                points: dict[str, Any] = {}
                for name, (model, texts) in loads.items():
                    bodies = [
                        json.dumps({"model": model, "inputs": text, "truncation": True}).encode() for text in texts
                    ]
                    jobs = [
                        pool.submit(client_rate, port, bodies, clients, warmup_s, seconds) for port in ports[:count]
                    ]
                    rates = [job.result() for job in jobs]
                    points[name] = {
                        "sequences_per_s": round(sum(rate for rate, _ in rates), 1),
                        "per_server": [round(rate, 1) for rate, _ in rates], "clients_each": clients,
                    }  # fmt: skip
                    log.info("%d servers, %s: %s", count, name, points[name])
                found["counts"][str(count)] = points
    return found


def markdown_lines(results: dict[str, Any]) -> list[str]:
    """The report's section: summed sequences/s per server count, beside the one server's c=128 point."""
    found, served = results.get("processes"), results.get("served", {})
    if not found or not found.get("counts"):
        return []
    names = sorted({name for points in found["counts"].values() for name in points})
    lines = ["## More than one serving process on the card (benchmarks.gpu_processes)", "",
             f"c={found['total_clients']} in all, split evenly over the servers, one client process each; sequences/s "
             "summed (per server in brackets).", "",
             "| workload | one server, c=128 | " + " | ".join(f"{count} servers" for count in found["counts"]) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in found["counts"]) + " |"]  # fmt: skip
    for name in names:
        one = served.get(name, {}).get("c128", {}).get("sequences_per_s")
        cells = []
        for points in found["counts"].values():
            point = points.get(name)
            if point is None:
                cells.append("-")
                continue
            each = ", ".join(f"{rate:,.0f}" for rate in point["per_server"])
            cells.append(f"{point['sequences_per_s']:,.1f} ({each})")
        lines.append(f"| {name} | {'-' if one is None else f'{one:,.1f}'} | " + " | ".join(cells) + " |")
    return [*lines, ""]
