"""The hostile benchmark's clients over raw sockets: a paced well-behaved client, and the hostile ones.

Every hostile client is bounded: it stops at ``until`` (a ``time.perf_counter()`` moment) and reports what the
server did to it as an ``Outcome``: the status it was answered with, or that the server closed the connection
without an answer, or that it was still open when the client gave up; and after how many seconds.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from benchmarks.overload_client import Connection, Tally, send_one

READ_LIMIT = 1 << 16
CLOSE_WAIT_S = 1.0  # after an answer, how long to wait for the server to close the connection


@dataclass(frozen=True)
class Outcome:
    """What one hostile connection got: ``status`` ("408", ..., "closed": closed unanswered, "open": still open,
    "connect_error"), after ``seconds``, and whether the server closed the connection after answering."""

    status: str
    seconds: float
    closed: bool


def request_head(path: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def good_client(host: str, port: int, path: str, body: bytes, stop: asyncio.Event, interval_s: float) -> Tally:
    """One keep-alive connection sending ``body`` every ``interval_s`` (or as soon as the last answer came)."""
    tally, connection = Tally(), Connection(host, port)
    while not stop.is_set():
        started = time.perf_counter()
        await send_one(connection, path, body, 10.0, tally)
        await asyncio.sleep(max(0.0, interval_s - (time.perf_counter() - started)))
    connection.close()
    return tally


async def read_answer(reader: asyncio.StreamReader, started: float) -> Outcome:
    """The answer's status (or the connection closed without one); when the answer says ``Connection: close``,
    whether the server then closes the connection within ``CLOSE_WAIT_S``."""
    try:
        line = await reader.readline()
        length, close = 0, False
        while (header := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            close = close or (name.lower() == "connection" and value.strip().lower() == "close")
        await reader.readexactly(length)
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        line, close = b"", True
    seconds = time.perf_counter() - started
    if not line:
        return Outcome("closed", seconds, True)
    status = line.split()[1].decode() if len(line.split()) > 1 else "garbled"
    if not close:
        return Outcome(status, seconds, False)
    try:
        closed = await asyncio.wait_for(reader.read(READ_LIMIT), CLOSE_WAIT_S) == b""
    except (ConnectionError, OSError):
        closed = True
    except TimeoutError:
        closed = False
    return Outcome(status, seconds, closed)


async def trickle(
    host: str, port: int, first: bytes, drip: Callable[[int], bytes], interval_s: float, until: float
) -> Outcome:
    """Send ``first``, then ``drip(n)`` every ``interval_s`` until the server answers or closes, or ``until``."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return Outcome("connect_error", 0.0, True)
    started = time.perf_counter()
    answer = asyncio.ensure_future(read_answer(reader, started))
    try:
        writer.write(first)
        sent = 0
        while time.perf_counter() < until:
            done, _ = await asyncio.wait({answer}, timeout=min(interval_s, max(0.0, until - time.perf_counter())))
            if done:
                break
            writer.write(drip(sent))
            sent += 1
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    try:
        return await asyncio.wait_for(answer, CLOSE_WAIT_S + 0.5)
    except TimeoutError:
        return Outcome("open", time.perf_counter() - started, False)
    finally:
        writer.close()


async def slow_body(host: str, port: int, path: str, interval_s: float, until: float) -> Outcome:
    """A POST declaring 100,000 bytes of body that sends one byte every ``interval_s`` (issue 31's attacker)."""
    return await trickle(host, port, request_head(path, 100_000) + b"{", lambda _: b" ", interval_s, until)


async def slow_headers(host: str, port: int, path: str, interval_s: float, until: float) -> Outcome:
    """A request line, then one more byte of a never-ending header every ``interval_s``."""
    first = f"POST {path} HTTP/1.1\r\nHost: bench\r\nX-Slow: ".encode()
    return await trickle(host, port, first, lambda _: b"a", interval_s, until)


async def idle(host: str, port: int, until: float) -> Outcome:
    """Connect and send nothing."""
    return await trickle(host, port, b"", lambda _: b"", max(0.0, until - time.perf_counter()), until)


async def first_bytes(reader: asyncio.StreamReader, wait_s: float) -> str:
    """The status of what the server sent within ``wait_s`` ("nothing" if nothing came)."""
    try:
        got = await asyncio.wait_for(reader.read(20), wait_s)
    except (TimeoutError, ConnectionError, OSError):
        got = b""
    return got.split(b" ")[1].decode() if len(got.split(b" ")) > 1 else "nothing"


async def leave_mid_body(host: str, port: int, path: str, rng: random.Random) -> Outcome:
    """Send half of a body, wait up to 50 ms, then go (a FIN, or a reset every other time)."""
    reader, writer = await asyncio.open_connection(host, port)
    started = time.perf_counter()
    writer.write(request_head(path, 2000) + b'{"inputs": "' + b"a" * 990)
    await writer.drain()
    status = await first_bytes(reader, rng.uniform(0.0, 0.05))
    if rng.random() < 0.5:
        writer.transport.abort()
    else:
        writer.close()
    return Outcome(status, time.perf_counter() - started, False)


async def leave_mid_answer(host: str, port: int, path: str, body: bytes, rng: random.Random) -> Outcome:
    """Send a whole request that keeps the model busy a while, read at most 20 bytes of the answer for up to
    150 ms, then reset the connection."""
    reader, writer = await asyncio.open_connection(host, port)
    started = time.perf_counter()
    writer.write(request_head(path, len(body)) + body)
    await writer.drain()
    status = await first_bytes(reader, rng.uniform(0.0, 0.15))
    writer.transport.abort()
    return Outcome(status, time.perf_counter() - started, False)


async def one_request(host: str, port: int, raw: bytes) -> Outcome:
    """Send ``raw`` (a whole request) on a new connection and read the answer."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return Outcome("connect_error", 0.0, True)
    started = time.perf_counter()
    try:
        writer.write(raw)
        await writer.drain()
    except (ConnectionError, OSError):
        pass
    try:
        return await asyncio.wait_for(read_answer(reader, started), 30.0)
    except TimeoutError:
        return Outcome("open", time.perf_counter() - started, False)
    finally:
        writer.close()


async def pipelined(host: str, port: int, path: str, body: bytes, count: int) -> list[Outcome]:
    """``count`` requests written at once on one connection; the answers read in order."""
    reader, writer = await asyncio.open_connection(host, port)
    started = time.perf_counter()
    writer.write((request_head(path, len(body)) + body) * count)
    await writer.drain()
    outcomes = []
    for _ in range(count):
        line = await asyncio.wait_for(reader.readline(), 30.0)
        length = 0
        while (header := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        await reader.readexactly(length)
        status = line.split()[1].decode() if line else "closed"
        outcomes.append(Outcome(status, time.perf_counter() - started, False))
    writer.close()
    return outcomes


async def repeat(make: Callable[[], Awaitable[Outcome]], workers: int, until: float) -> list[Outcome]:
    """``workers`` loops each running ``make()`` one after another until ``until``."""

    async def loop() -> list[Outcome]:
        outcomes = []
        while time.perf_counter() < until:
            try:
                outcomes.append(await make())
            except (ConnectionError, OSError) as error:
                outcomes.append(Outcome(type(error).__name__, 0.0, True))
        return outcomes

    return [outcome for part in await asyncio.gather(*(loop() for _ in range(workers))) for outcome in part]


async def opened(makers: Sequence[Callable[[], Awaitable[Outcome]]], chunk: int = 200) -> list[asyncio.Task[Outcome]]:
    """Start every client, ``chunk`` connections at a time (the listen backlog is finite); their tasks."""
    tasks: list[asyncio.Task[Outcome]] = []
    for start in range(0, len(makers), chunk):
        tasks += [asyncio.ensure_future(make()) for make in makers[start : start + chunk]]
        await asyncio.sleep(0.05)
    return tasks


def summary(outcomes: list[Outcome]) -> dict[str, object]:
    """Counts by status, how many were closed by the server, and the slowest answer."""
    return {
        "count": len(outcomes),
        "statuses": dict(Counter(outcome.status for outcome in outcomes).most_common()),
        "closed_by_server": sum(outcome.closed for outcome in outcomes),
        "max_seconds": round(max((outcome.seconds for outcome in outcomes), default=0.0), 2),
    }
