"""The overload check's HTTP client: keep-alive connections, a closed loop (capacity) and an open loop (overload).

Lighter than a general client and bounded on purpose: one request at a time per connection, at most
``max_connections`` of them, a send due while every connection is busy is skipped and counted
(``client_skipped``), never queued. Every answer's status, latency, completion time and (for 429s) Retry-After
header is recorded in a ``Tally``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from benchmarks.servers import session_cpu_seconds

RETRY_AFTER_CAP_S = 1.0  # a closed-loop client honours Retry-After up to this long before sending again


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def wait_idle(session_id: int, most_s: float, cores_busy: float = 0.2, step_s: float = 0.5) -> float:
    """Wait until the server (every process of its session) uses under ``cores_busy`` cores over ``step_s``, at most
    ``most_s``: work a previous phase left behind (a batch already running when its clients went away) finishes
    first. Returns the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < most_s:
        before = session_cpu_seconds(session_id)
        await asyncio.sleep(step_s)
        if (session_cpu_seconds(session_id) - before) / step_s < cores_busy:
            break
    return time.perf_counter() - started


class Answer(NamedTuple):
    status: int
    retry_after: str | None


class Connection:
    """One keep-alive HTTP/1.1 connection, one request at a time."""

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

    async def post(self, path: str, body: bytes, timeout_s: float) -> Answer:
        return await asyncio.wait_for(self._request("POST", path, body), timeout_s)

    async def warm(self, timeout_s: float) -> Answer:
        """Connect and wait for one answer (GET /health/live, not counted by the in-flight cap)."""
        return await asyncio.wait_for(self._request("GET", "/health/live", b""), timeout_s)

    async def _request(self, method: str, path: str, body: bytes) -> Answer:
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
        length, close, retry_after = 0, False, None
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
            elif name == "retry-after":
                retry_after = value.strip()
        await self.reader.readexactly(length)
        self.last_answer = time.perf_counter()
        if close:
            self.close()
        return Answer(status, retry_after)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = None


@dataclass
class Tally:
    statuses: Counter[str] = field(default_factory=Counter)
    admitted_latencies: list[float] = field(default_factory=list)
    admitted_finished: list[float] = field(default_factory=list)  # perf_counter() when each 200 arrived
    # the first request on a new connection also waits for the server to accept it
    admitted_on_new_connections: list[float] = field(default_factory=list)
    retry_after: Counter[str] = field(default_factory=Counter)  # 429s by Retry-After value ("none": no header)
    errors: Counter[str] = field(default_factory=Counter)
    reopened_after_server_close: int = 0
    error_idle_s: list[float] = field(default_factory=list)  # how long a reused connection had been idle

    def record(self, status: str, latency: float, new_connection: bool = False, retry_after: str | None = None) -> None:
        self.statuses[status] += 1
        if status == "200":
            self.admitted_latencies.append(latency)
            self.admitted_finished.append(time.perf_counter())
            if new_connection:
                self.admitted_on_new_connections.append(latency)
        elif status == "429":
            self.retry_after[retry_after or "none"] += 1


async def send_one(connection: Connection, path: str, body: bytes, timeout_s: float, tally: Tally) -> Answer | None:
    started = time.perf_counter()
    if connection.closed_by_server:
        tally.reopened_after_server_close += 1
        connection.close()
    new_connection = not connection.open
    answer = None
    try:
        answer = await connection.post(path, body, timeout_s)
        status = str(answer.status)
    except TimeoutError:
        status = "client_timeout"
        connection.close()
    except (ConnectionError, OSError, ValueError, asyncio.IncompleteReadError) as error:
        status = "connection_error"
        tally.errors[f"{type(error).__name__}: {error}"[:80]] += 1
        if not new_connection:
            tally.error_idle_s.append(started - connection.last_answer)
        connection.close()
    tally.record(status, time.perf_counter() - started, new_connection, answer.retry_after if answer else None)
    return answer


def backoff_s(answer: Answer | None) -> float:
    """How long a closed-loop client waits before its next request: Retry-After (capped) after a 429, a little
    after any other failure (no busy loop), nothing after a 200."""
    if answer is not None and answer.status == 200:
        return 0.0
    if answer is not None and answer.status == 429 and answer.retry_after:
        try:
            return min(RETRY_AFTER_CAP_S, max(0.0, float(answer.retry_after)))
        except ValueError:  # an HTTP date: not what this server sends
            return RETRY_AFTER_CAP_S
    return 0.05


def no_backoff_after_429(answer: Answer | None) -> float:
    """A client that ignores Retry-After: sends again at once after a 429 (``backoff_s`` otherwise)."""
    return 0.0 if answer is not None and answer.status == 429 else backoff_s(answer)


def throughput_between(finished: list[float], start: float, end: float) -> float | None:
    """Answers/s in steady state from completion times: the answers after the last completion at or before
    ``start`` up to the last completion at or before ``end``, over the time between those two completions.

    A batching server answers in bursts (a batch of 16 long rows every few seconds): counting answers in a fixed
    window would be off by up to a burst; measuring between completions is not. None with fewer than two
    completion moments in the window (measure longer).
    """
    ordered = sorted(finished)
    inside = [moment for moment in ordered if moment <= end]
    before = [moment for moment in inside if moment <= start]
    first = before[-1] if before else (inside[0] if inside else None)
    if first is None:
        return None
    counted = [moment for moment in inside if moment > first]
    if not counted or counted[-1] <= first:
        return None
    return len(counted) / (counted[-1] - first)


async def closed_loop(
    host: str,
    port: int,
    path: str,
    bodies: list[bytes],
    concurrency: int,
    warmup_s: float,
    seconds: float,
    timeout_s: float = 60.0,
    min_seconds_cap: float = 3.0,
    backoff: Callable[[Answer | None], float] = backoff_s,
) -> tuple[float | None, Tally]:
    """``concurrency`` clients each keeping one request in flight: answers/s (200) between ``warmup_s`` and
    ``warmup_s + seconds`` by ``throughput_between``; the loop runs on (up to ``min_seconds_cap`` x longer) until
    two completion moments fall in that window, then stops, abandoning what is still in flight."""
    tally = Tally()
    started = time.perf_counter()
    window_start, window_end = started + warmup_s, started + warmup_s + seconds
    hard_end = started + warmup_s + seconds * min_seconds_cap
    stop = asyncio.Event()

    async def client(index: int) -> None:
        connection = Connection(host, port)
        sent = index
        try:
            while not stop.is_set():
                answer = await send_one(connection, path, bodies[sent % len(bodies)], timeout_s, tally)
                sent += concurrency
                await asyncio.sleep(backoff(answer))
        finally:
            connection.close()

    tasks = [asyncio.create_task(client(index)) for index in range(concurrency)]
    while time.perf_counter() < hard_end:
        await asyncio.sleep(0.05)
        now = time.perf_counter()
        done_in_window = [moment for moment in tally.admitted_finished if window_start < moment <= now]
        if now >= window_end and (len(done_in_window) >= 2 or not tally.admitted_finished):
            break
    stop.set()
    end = time.perf_counter()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return throughput_between(tally.admitted_finished, window_start, end), tally


async def open_loop(
    host: str,
    port: int,
    path: str,
    bodies: list[bytes],
    rate: float,
    seconds: float,
    max_connections: int,
    timeout_s: float,
    on_marks: dict[float, Callable[[], object]],
    preconnect: bool = True,
) -> tuple[Tally, float]:
    """``rate`` requests/s for ``seconds`` (at most rate x seconds sends) over at most ``max_connections``;
    ``on_marks[f]()`` is called once a fraction ``f`` of ``seconds`` has passed. Returns the tally and the
    perf_counter() moment the first request was due."""
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
    return tally, started


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
