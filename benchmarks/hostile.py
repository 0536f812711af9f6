"""Hostile clients against one server (issue 31): loopback only, bounded in count and time, one command.

It starts ``python -m service`` on 127.0.0.1 with one text-classification bundle and the default settings, then
runs one phase after another. In each phase a well-behaved client sends one SST-2-like request every 50 ms on a
keep-alive connection while the hostile clients do their thing:

- calm: nobody else (the baseline);
- slow bodies at 1x, 2x and 10x the in-flight cap: each declares 100,000 bytes and sends one byte every 5 s;
- slow headers: 2,000 connections sending one more header byte every 5 s;
- idle connections: 3,000 connections that send nothing;
- leaving mid-body (half a body, then a FIN or a reset) and mid-answer (an 8-input request, reset within 150 ms);
- oversized headers (32 KB, 1 MB, 8 MB), hostile JSON (100,000 levels deep, 500,000 items wide, 1e999999, a
  100,000-digit number, a duplicate key) on the v1 and v2 routes, a body that is not UTF-8, pipelined requests.

For each phase it records what the good client saw (statuses, p50/p99 against the calm baseline), what the
hostile ones got (statuses, closed or not, after how long) and the server's RSS and open file descriptors before
and after; the load average at the start and the end. Results: benchmarks/results/hostile.{json,md}.

    python -m benchmarks.hostile                                   # the sst2 bundle found or built here
    python -m benchmarks.hostile --model sst2=/tmp/exp/sst2-fp32   # a bundle of your own
    python -m benchmarks.hostile --quick --out /tmp/hostile        # a smoke run: few clients, short deadline
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import resource
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import hostile_clients as clients
from benchmarks import servers
from benchmarks.datasets import RESULTS_DIR, SCRATCH_DIR
from benchmarks.hostile_report import good_summary, markdown, verdicts
from benchmarks.overload import load_average
from benchmarks.overload_client import rss_bytes
from benchmarks.overload_loads import default_bundle

log = logging.getLogger("benchmarks.hostile")
RESULTS_PREFIX = RESULTS_DIR / "hostile"
LOG_DIR = SCRATCH_DIR / "hostile-logs"
HOST = "127.0.0.1"
ROUTE = "/v1/text-classification"
GOOD_TEXT = "A gripping, beautifully acted film that stays with you long after it ends."
GOOD_BODY = json.dumps({"inputs": GOOD_TEXT}).encode()
GOOD_INTERVAL_S = 0.05
TRICKLE_S = 5.0  # the slow clients' pace: one byte every 5 s
SETTLE_S = 1.0  # after a phase, for the server to notice closed connections before it is measured


@dataclass(frozen=True)
class Scale:
    """How many hostile clients, and how long the phases without a natural end last."""

    divide: int  # client counts are divided by this (1: the full run)
    phase_s: float
    body_timeout_s: float | None  # None: the server's default
    max_concurrent_requests: int | None  # None: the server's default

    def server_flags(self) -> list[str]:
        flags = [] if self.body_timeout_s is None else ["--body-timeout-s", str(self.body_timeout_s)]
        if self.max_concurrent_requests is not None:
            flags += ["--max-concurrent-requests", str(self.max_concurrent_requests)]
        return flags


FULL = Scale(divide=1, phase_s=10.0, body_timeout_s=None, max_concurrent_requests=None)
QUICK = Scale(divide=16, phase_s=2.0, body_timeout_s=2.0, max_concurrent_requests=8)


@dataclass
class Target:
    port: int
    pid: int
    cap: int
    deadline_s: float
    scale: Scale
    rng: random.Random

    def count(self, full: int) -> int:
        return max(1, full // self.scale.divide)

    def until(self, seconds: float) -> float:
        return time.perf_counter() + seconds


def server_state(pid: int) -> dict[str, float]:
    return {"rss_mb": round(rss_bytes(pid) / 2**20, 1), "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def calm(target: Target) -> dict[str, Any]:
    await asyncio.sleep(target.scale.phase_s)
    return {}


def slow_bodies(multiple: int) -> Callable[[Target], Awaitable[dict[str, Any]]]:
    async def attack(target: Target) -> dict[str, Any]:
        until = target.until(target.deadline_s + 10.0)
        senders = [
            lambda: clients.slow_body(HOST, target.port, ROUTE, TRICKLE_S, until) for _ in range(multiple * target.cap)
        ]
        outcomes = [await task for task in await clients.opened(senders)]
        within = target.deadline_s + 5.0
        ended = [o for o in outcomes if o.status in ("408", "429", "closed") and o.closed and o.seconds <= within]
        return {**clients.summary(outcomes), "senders": len(outcomes), "ended_within_deadline_plus_5s": len(ended)}

    return attack


def held_open(kind: str, full: int) -> Callable[[Target], Awaitable[dict[str, Any]]]:
    async def attack(target: Target) -> dict[str, Any]:
        until = target.until(target.scale.phase_s)
        if kind == "headers":
            makers = [lambda: clients.slow_headers(HOST, target.port, ROUTE, TRICKLE_S, until)] * target.count(full)
        else:
            makers = [lambda: clients.idle(HOST, target.port, until)] * target.count(full)
        tasks = await clients.opened(makers)
        mid = server_state(target.pid)
        return {**clients.summary([await task for task in tasks]), "server_while_held": mid}

    return attack


async def leaving_mid_body(target: Target) -> dict[str, Any]:
    until = target.until(target.scale.phase_s)
    outcomes = await clients.repeat(lambda: clients.leave_mid_body(HOST, target.port, ROUTE, target.rng), 16, until)
    return clients.summary(outcomes)


async def leaving_mid_answer(target: Target) -> dict[str, Any]:
    body = json.dumps({"inputs": [GOOD_TEXT] * 8}).encode()

    async def attempt() -> clients.Outcome:
        outcome = await clients.leave_mid_answer(HOST, target.port, ROUTE, body, target.rng)
        await asyncio.sleep(0.2)  # a bounded rate: about 40 % of the model's capacity in all, not an overload
        return outcome

    outcomes = await clients.repeat(attempt, 4, target.until(target.scale.phase_s))
    return clients.summary(outcomes)


async def oversized_headers(target: Target) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for size, count in ((32 << 10, 16), (1 << 20, 16), (8 << 20, 4)):
        extra = "X-Big: " + "a" * size + "\r\n"
        raw = clients.request_head(ROUTE, len(GOOD_BODY), extra) + GOOD_BODY
        outcomes = await asyncio.gather(*(clients.one_request(HOST, target.port, raw) for _ in range(count)))
        results[f"{size >> 10} KB header"] = clients.summary(list(outcomes))
    return results


def hostile_json() -> dict[str, bytes]:
    return {
        "100,000 levels deep": b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "500,000 items wide": b'{"inputs": [' + b"1," * 499_999 + b"1]}",
        "30,000 texts": json.dumps({"inputs": ["a"] * 30_000}).encode(),
        "1e999999": b'{"inputs": "a", "top_k": 1e999999}',
        "100,000-digit number": b'{"inputs": "a", "top_k": 1' + b"0" * 100_000 + b"}",
        "duplicate key": b'{"inputs": "a", "inputs": "b"}',
        "not UTF-8": b'{"inputs": "caf\xe9 \xff\xfe"}',
    }


def as_v2(body: bytes) -> bytes:
    """The same hostile part in a v2 infer body (its ``parameters``), the text as a BYTES tensor."""
    tensor = b'{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a"]}'
    return b'{"inputs": [' + tensor + b'], "parameters": ' + body + b"}"


async def json_bodies(target: Target) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, body in hostile_json().items():
        for path, sent in ((ROUTE, body), ("/v2/models/sst2/infer", as_v2(body))):
            outcomes = []
            for _ in range(target.count(10)):
                raw = clients.request_head(path, len(sent)) + sent
                outcomes.append(await clients.one_request(HOST, target.port, raw))
            summary = clients.summary(outcomes)
            summary["median_ms"] = round(sorted(o.seconds for o in outcomes)[len(outcomes) // 2] * 1000, 1)
            results[f"{name} on {'v2' if path.startswith('/v2') else 'v1'}"] = summary
    return results


async def pipelined(target: Target) -> dict[str, Any]:
    parts = await asyncio.gather(
        *(clients.pipelined(HOST, target.port, ROUTE, GOOD_BODY, 50) for _ in range(target.count(10)))
    )
    return clients.summary([outcome for part in parts for outcome in part])


def phases(target: Target) -> list[tuple[str, str, Callable[[Target], Awaitable[dict[str, Any]]]]]:
    cap, headers, idle = target.cap, target.count(2000), target.count(3000)
    json_times = target.count(10)
    return [
        ("calm", "the good client alone", calm),
        *(
            (f"slow bodies {m}x", f"{m * cap:,} connections, 1 byte / 5 s of 100,000 declared", slow_bodies(m))
            for m in (1, 2, 10)
        ),
        ("slow headers", f"{headers:,} connections, 1 header byte / 5 s", held_open("headers", 2000)),
        ("idle connections", f"{idle:,} connections sending nothing", held_open("idle", 3000)),
        ("leave mid-body", "16 loops: half a body, then FIN or reset", leaving_mid_body),
        ("leave mid-answer", "4 loops: 8-input request, reset within 150 ms, 200 ms pause", leaving_mid_answer),
        ("oversized headers", "16 x 32 KB, 16 x 1 MB, 4 x 8 MB header", oversized_headers),
        ("hostile JSON", f"each body {json_times} times on v1 and v2, one connection each", json_bodies),
        ("pipelined", f"{target.count(10)} connections x 50 requests written at once", pipelined),
    ]


async def run_phase(target: Target, name: str, description: str, attack: Any) -> dict[str, Any]:
    log.info("phase %s: %s", name, description)
    before = server_state(target.pid)
    stop = asyncio.Event()
    good = asyncio.ensure_future(clients.good_client(HOST, target.port, ROUTE, GOOD_BODY, stop, GOOD_INTERVAL_S))
    started = time.perf_counter()
    hostile = await attack(target)
    seconds = time.perf_counter() - started
    stop.set()
    tally = await good
    await asyncio.sleep(SETTLE_S)
    after = server_state(target.pid)
    return {
        "name": name,
        "description": description,
        "seconds": round(seconds, 1),
        "good": good_summary(tally),
        "hostile": hostile,
        "server_before": before,
        "server_after": after,
    }


async def run_all(target: Target, only: set[str] | None) -> list[dict[str, Any]]:
    results = []
    for name, description, attack in phases(target):
        if only is None or name == "calm" or name in only:
            results.append(await run_phase(target, name, description, attack))
    return results


def raise_fd_limit() -> int:
    """Let this process (and the server it starts) open as many files as the hard limit allows."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hostile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="NAME=PATH of a text-classification bundle (default: sst2, found or built)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1/16 of the clients, 2 s phases")
    parser.add_argument("--phase", action="append", help="run only this phase (and calm); repeatable")
    parser.add_argument("--out", type=Path, default=RESULTS_PREFIX, help="results prefix (.json and .md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from service.settings import Settings

    scale = QUICK if args.quick else FULL
    name, _, path = (args.model or f"sst2={default_bundle('sst2')}").partition("=")
    defaults = Settings()
    deadline_s = scale.body_timeout_s or defaults.body_timeout_s
    fd_limit = raise_fd_limit()
    port = servers.free_port()
    command = servers.bertserve_command({name: Path(path)}, port) + scale.server_flags()
    load_start = load_average()
    started = time.time()
    with servers.running("bertserve-hostile", command, port, "/health/ready", LOG_DIR) as server:
        at_ready = server_state(server.pid)
        cap = scale.max_concurrent_requests or defaults.max_concurrent_requests
        target = Target(port, server.pid, cap, deadline_s, scale, random.Random(0))
        results = asyncio.run(run_all(target, set(args.phase) if args.phase else None))
        at_end = server_state(server.pid)
        log_text = server.log_path.read_text(errors="replace")
    report = {
        "command": " ".join(["python -m benchmarks.hostile", *(argv if argv is not None else sys.argv[1:])]),
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "wall_s": round(time.time() - started, 1),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "model": {"name": name, "path": path},
        "server": {"max_concurrent_requests": target.cap, "body_timeout_s": deadline_s, "fd_limit": fd_limit},
        "server_at_ready": at_ready,
        "server_at_end": at_end,
        "server_log": {"errors": log_text.count(" ERROR "), "tracebacks": log_text.count("Traceback")},
        "phases": results,
    }
    report["verdicts"] = verdicts(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    log.info("wrote %s.{json,md}", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
