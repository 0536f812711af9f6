"""Overload check: twice the server's capacity over loopback, bounded in time, count and connections.

Starts ``python -m service`` on 127.0.0.1 with one bundle, measures its capacity (closed loop,
``--measure-concurrency`` clients; or takes ``--capacity``), then sends requests open-loop at
``--overload`` x capacity for ``--duration`` seconds (default 600) over at most ``--max-connections``
keep-alive connections, opened and answered once before the load as a client pool's would be
(``--no-preconnect``: opened during the burst, when a first request also waits in the server's accept
queue). A send due while every connection is busy is skipped and counted (``client_skipped``): the client
never queues without bound. It reports the status counts, p50/p99 latency of the admitted (200) requests,
the server's RSS before the load and at 10 % (start), 50 % and the end of it, and whether the targets
hold: only 200 and 429, p99 of admitted < 2 s, RSS growth (start to end) < 5 %.

    python -m benchmarks.overload --model sst2=models/sst2 --duration 600
    python -m benchmarks.overload --model sst2=models/sst2 --duration 15 --out benchmarks/scratch/overload

Results go to benchmarks/results/overload.{json,md} unless ``--out`` names another prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import servers
from benchmarks.datasets import REPO_ROOT

log = logging.getLogger("benchmarks.overload")
RESULTS_PREFIX = REPO_ROOT / "benchmarks" / "results" / "overload"
LOG_DIR = REPO_ROOT / "benchmarks" / "scratch" / "overload-logs"
TARGET_P99_S = 2.0
TARGET_RSS_GROWTH = 0.05
RSS_START_FRACTION = 0.1  # "start" RSS: once the overload has run this long (connection buffers allocated)
FALLBACK_TEXTS = [
    "A wonderful, moving film with a brilliant cast.",
    "Dull, far too long, and the plot makes no sense.",
    "The music was great but the acting was wooden.",
    "An honest, funny and surprisingly tender story.",
]


def sentences(limit: int = 2000) -> list[str]:
    """SST-2 dev sentences when the shared data is there, else a few fixed ones."""
    try:
        from benchmarks.datasets import read_sst2

        return [row.text for row in read_sst2("dev")[:limit]]
    except OSError:
        return FALLBACK_TEXTS


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time (lighter than a general client)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.last_answer = 0.0

    @property
    def open(self) -> bool:
        return self.writer is not None and not self.writer.is_closing()

    @property
    def closed_by_server(self) -> bool:
        """The server ended this idle connection (its keep-alive timeout): as httpcore's and urllib3's pools
        do, a client checks this before reuse and reconnects instead of sending on a closed socket."""
        return self.open and self.reader is not None and self.reader.at_eof()

    async def post(self, path: str, body: bytes, timeout_s: float) -> int:
        return await asyncio.wait_for(self._request("POST", path, body), timeout_s)

    async def warm(self, timeout_s: float) -> int:
        """Connect and wait for one answer (GET /health/live, not counted by the in-flight cap)."""
        return await asyncio.wait_for(self._request("GET", "/health/live", b""), timeout_s)

    async def _request(self, method: str, path: str, body: bytes) -> int:
        if not self.open:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None and self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("connection closed")
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        await self.reader.readexactly(length)
        self.last_answer = time.perf_counter()
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = None


@dataclass
class Tally:
    statuses: Counter[str] = field(default_factory=Counter)
    admitted_latencies: list[float] = field(default_factory=list)
    # the first request on a new connection also waits for the server to accept it
    admitted_on_new_connections: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    reopened_after_server_close: int = 0
    error_idle_s: list[float] = field(default_factory=list)  # how long a reused connection had been idle

    def record(self, status: str, latency: float, new_connection: bool = False) -> None:
        self.statuses[status] += 1
        if status == "200":
            self.admitted_latencies.append(latency)
            if new_connection:
                self.admitted_on_new_connections.append(latency)


async def send_one(connection: Connection, path: str, body: bytes, timeout_s: float, tally: Tally) -> None:
    started = time.perf_counter()
    if connection.closed_by_server:
        tally.reopened_after_server_close += 1
        connection.close()
    new_connection = not connection.open
    try:
        status = str(await connection.post(path, body, timeout_s))
    except TimeoutError:
        status = "client_timeout"
        connection.close()
    except (ConnectionError, OSError, ValueError, asyncio.IncompleteReadError) as error:
        status = "connection_error"
        tally.errors[f"{type(error).__name__}: {error}"[:80]] += 1
        if not new_connection:
            tally.error_idle_s.append(started - connection.last_answer)
        connection.close()
    tally.record(status, time.perf_counter() - started, new_connection)


async def closed_loop(host: str, port: int, path: str, bodies: list[bytes], concurrency: int, seconds: float) -> float:
    """Requests per second answered 200 with ``concurrency`` clients each keeping one request in flight."""
    tally = Tally()
    deadline = time.perf_counter() + seconds

    async def client(index: int) -> None:
        connection = Connection(host, port)
        sent = index
        while time.perf_counter() < deadline:
            await send_one(connection, path, bodies[sent % len(bodies)], 30.0, tally)
            sent += concurrency
        connection.close()

    await asyncio.gather(*(client(index) for index in range(concurrency)))
    return tally.statuses["200"] / seconds


async def open_loop(
    host: str,
    port: int,
    path: str,
    bodies: list[bytes],
    rate: float,
    seconds: float,
    max_connections: int,
    timeout_s: float,
    on_marks: dict[float, Any],
    preconnect: bool = True,
) -> Tally:
    """``rate`` requests/s for ``seconds`` (at most rate x seconds sends) over at most ``max_connections``;
    ``on_marks[f]()`` is called once a fraction ``f`` of ``seconds`` has passed."""
    tally = Tally()
    idle = [Connection(host, port) for _ in range(max_connections)]
    if preconnect:  # as a client's connection pool would be: connected and answered once before the load
        await asyncio.gather(*(connection.warm(timeout_s) for connection in idle))
    tasks: set[asyncio.Task[None]] = set()
    total = int(rate * seconds)
    started = time.perf_counter()
    marks = sorted(on_marks)

    async def run(connection: Connection, body: bytes) -> None:
        try:
            await send_one(connection, path, body, timeout_s, tally)
        finally:
            idle.append(connection)

    for index in range(total):
        due = started + index / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        while marks and time.perf_counter() - started >= marks[0] * seconds:
            on_marks[marks.pop(0)]()
        if not idle:
            tally.statuses["client_skipped"] += 1
            continue
        task = asyncio.create_task(run(idle.pop(), bodies[index % len(bodies)]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=timeout_s + 5)
    for connection in idle:
        connection.close()
    return tally


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summarise(args: argparse.Namespace, capacity: float, tally: Tally, rss: dict[str, int]) -> dict[str, Any]:
    p50, p99 = percentile(tally.admitted_latencies, 0.50), percentile(tally.admitted_latencies, 0.99)
    growth = (rss["end"] - rss["start"]) / rss["start"]
    unexpected = sorted(status for status in tally.statuses if status not in ("200", "429", "client_skipped"))
    return {
        "settings": {
            "model": args.model,
            "duration_s": args.duration,
            "overload": args.overload,
            "capacity_rps": capacity,
            "rate_rps": capacity * args.overload,
            "max_connections": args.max_connections,
            "server_args": args.server_args,
            "preconnect": args.preconnect,
            "client_timeout_s": args.timeout,
        },
        "statuses": dict(sorted(tally.statuses.items())),
        "admitted_p50_s": p50,
        "admitted_p99_s": p99,
        "admitted_on_new_connections": {
            "count": len(tally.admitted_on_new_connections),
            "p99_s": percentile(tally.admitted_on_new_connections, 0.99),
        },
        "reopened_after_server_close": tally.reopened_after_server_close,
        "connection_errors": {
            "kinds": dict(tally.errors.most_common()),
            "idle_s_before_reuse": {
                "count": len(tally.error_idle_s),
                "min": min(tally.error_idle_s, default=None),
                "p50": percentile(tally.error_idle_s, 0.5),
            },
        },
        "rss_bytes": rss,
        "rss_growth": growth,
        "targets": {
            "only_200_and_429": not unexpected,
            "admitted_p99_under_2s": p99 is not None and p99 < TARGET_P99_S,
            "rss_growth_under_5pct": growth < TARGET_RSS_GROWTH,
        },
    }


def markdown(summary: dict[str, Any]) -> str:
    settings, rss = summary["settings"], summary["rss_bytes"]

    def secs(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    lines = [
        "# Overload check",
        "",
        f"Model `{settings['model']}`, capacity {settings['capacity_rps']:.1f} req/s, sent at "
        f"{settings['rate_rps']:.1f} req/s ({settings['overload']}x) for {settings['duration_s']:.0f} s over at most "
        f"{settings['max_connections']} connections; server args `{settings['server_args'] or '(defaults)'}`.",
        "",
        *(
            [f"Load average (1, 5, 15 min) at start {summary['load_avg']['start']}, "
             f"at end {summary['load_avg']['end']}.", ""]
            if "load_avg" in summary
            else []
        ),
        "| status | count |",
        "| --- | ---: |",
        *(f"| {status} | {count} |" for status, count in summary["statuses"].items()),
        "",
        f"Admitted (200) latency: p50 {secs(summary['admitted_p50_s'])} s, p99 {secs(summary['admitted_p99_s'])} s; "
        f"{summary['admitted_on_new_connections']['count']} of them were the first request on a new connection "
        f"(p99 {secs(summary['admitted_on_new_connections']['p99_s'])} s, which includes waiting to be accepted).",
        "",
        f"Connections the server had closed while idle (uvicorn's keep-alive timeout) and the client reopened "
        f"before reuse, as a pooled client does: {summary.get('reopened_after_server_close', 0)}. "
        f"Connection errors by kind: {summary.get('connection_errors', {}).get('kinds') or 'none'}.",
        "",
        f"Server RSS: before the load {rss['before_load'] / 2**20:.1f} MiB; at 10 % of the run (start) "
        f"{rss['start'] / 2**20:.1f} MiB, middle {rss['middle'] / 2**20:.1f} MiB, "
        f"end {rss['end'] / 2**20:.1f} MiB ({100 * summary['rss_growth']:+.1f} %).",
        "",
        "| target | met |",
        "| --- | --- |",
        *(f"| {name} | {'yes' if met else 'no'} |" for name, met in summary["targets"].items()),
        "",
    ]
    return "\n".join(lines)


async def measure(args: argparse.Namespace, server: servers.Server, port: int) -> dict[str, Any]:
    texts = sentences()
    bodies = [json.dumps({"model": args.name, "inputs": text, "truncation": True}).encode() for text in texts]
    random.Random(0).shuffle(bodies)
    capacity = args.capacity
    if capacity is None:
        await closed_loop("127.0.0.1", port, args.path, bodies, args.measure_concurrency, 2.0)  # warm-up
        capacity = await closed_loop("127.0.0.1", port, args.path, bodies, args.measure_concurrency, args.measure_s)
        log.info("measured capacity: %.1f req/s", capacity)
    if capacity <= 0:
        raise RuntimeError("capacity is 0: the server answered no request with 200")
    rss = {"before_load": rss_bytes(server.pid)}

    def sample(name: str) -> Any:
        return lambda: rss.__setitem__(name, rss_bytes(server.pid))

    tally = await open_loop(
        "127.0.0.1",
        port,
        args.path,
        bodies,
        capacity * args.overload,
        args.duration,
        args.max_connections,
        args.timeout,
        {RSS_START_FRACTION: sample("start"), 0.5: sample("middle")},
        args.preconnect,
    )
    rss.setdefault("start", rss["before_load"])
    rss.setdefault("middle", rss["start"])
    rss["end"] = rss_bytes(server.pid)
    return summarise(args, capacity, tally, rss)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="NAME=PATH of a text-classification bundle")
    parser.add_argument("--path", default="/v1/text-classification", help="route to load")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of overload")
    parser.add_argument("--overload", type=float, default=2.0, help="sending rate as a multiple of capacity")
    parser.add_argument("--capacity", type=float, default=None, help="requests/s (default: measured)")
    parser.add_argument("--measure-s", type=float, default=10.0, help="seconds of the capacity measurement")
    parser.add_argument("--measure-concurrency", type=int, default=32, help="clients of the capacity measurement")
    parser.add_argument("--max-connections", type=int, default=800, help="client connections at most")
    parser.add_argument("--timeout", type=float, default=60.0, help="client-side timeout per request (s)")
    parser.add_argument(
        "--preconnect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="open and warm every client connection before the load (--no-preconnect: open them during the burst)",
    )
    parser.add_argument("--server-args", default="", help="extra flags for python -m service")
    parser.add_argument("--out", type=Path, default=RESULTS_PREFIX, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.name, _, model_path = args.model.partition("=")
    if args.duration > 3600 or args.max_connections > 5000:
        parser.error("bounded on purpose: --duration <= 3600 s and --max-connections <= 5000")
    load_at_start = os.getloadavg()
    port = servers.free_port()
    command = servers.bertserve_command({args.name: Path(model_path)}, port)
    command += ["--host", "127.0.0.1", "--log-level", "warning", *shlex.split(args.server_args)]
    with servers.running("bertserve-overload", command, port, "/health/ready", LOG_DIR) as server:
        summary = asyncio.run(measure(args, server, port))
    summary["load_avg"] = {"start": [round(v, 2) for v in load_at_start], "end": [round(v, 2) for v in os.getloadavg()]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(summary))
    print(markdown(summary))
    return 0 if all(summary["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
