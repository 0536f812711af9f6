"""The door keeps Retry-After per connection: a request sent on a connection before the Retry-After of its last 429
has passed waits it out and is answered 429 unread; other connections, and the same one once the time has passed,
are served as ever."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from service.core import Permits
from service.middleware import ConcurrencyLimitMiddleware

RETRY_AFTER_S = 1


class RefusesFirst:
    """An app that answers its first request 429 with Retry-After, every other one 200."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        status = 429 if self.calls == 1 else 200
        headers = [(b"retry-after", str(RETRY_AFTER_S).encode())] if status == 429 else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})


async def post(door: ConcurrencyLimitMiddleware, client: tuple[str, int]) -> tuple[int, float, dict[str, Any]]:
    """One POST from ``client`` through ``door``: its status, how long it took, and its start message."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/text-classification", "client": client, "headers": []}
    started = time.perf_counter()
    await door(scope, receive, send)
    return sent[0]["status"], time.perf_counter() - started, sent[0]


def test_an_early_request_waits_out_its_connections_retry_after_and_is_not_read() -> None:
    app = RefusesFirst()
    door = ConcurrencyLimitMiddleware(app, Permits(8))
    one, other = ("10.0.0.1", 40001), ("10.0.0.1", 40002)

    async def main() -> None:
        assert (await post(door, one))[0] == 429  # the app's refusal, with its Retry-After
        other_status, other_took, _ = await post(door, other)  # another connection is not held
        assert (other_status, app.calls) == (200, 2) and other_took < 0.2
        early_status, early_took, early = await post(door, one)
        assert early_status == 429 and app.calls == 2  # held, then refused without reaching the app
        assert RETRY_AFTER_S - 0.3 < early_took < RETRY_AFTER_S + 0.5
        assert dict(early["headers"])[b"retry-after"] == b"1"
        await asyncio.sleep(RETRY_AFTER_S + 0.05)  # a client that waits Retry-After out is served
        assert (await post(door, one))[0] == 200 and app.calls == 3

    asyncio.run(main())


def test_nothing_is_kept_when_turned_off_or_without_a_client_port() -> None:
    async def main() -> None:
        for door, client in (
            (ConcurrencyLimitMiddleware(RefusesFirst(), Permits(8), enforce_retry_after=False), ("10.0.0.1", 40001)),
            (ConcurrencyLimitMiddleware(RefusesFirst(), Permits(8)), ("10.0.0.9", 0)),  # behind a trusted proxy
        ):
            assert (await post(door, client))[0] == 429
            status, took, _ = await post(door, client)
            assert status == 200 and took < 0.2

    asyncio.run(main())


class RefusesOdd:
    """An app that answers its 1st, 3rd, ... request 429 with Retry-After and the others 200: a model that keeps
    refusing a client who retries at once, every other time."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        status = 429 if self.calls % 2 else 200
        headers = [(b"retry-after", str(RETRY_AFTER_S).encode())] if status == 429 else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})


def test_a_client_that_retries_at_once_reaches_the_app_once_per_retry_after() -> None:
    app = RefusesOdd()
    door = ConcurrencyLimitMiddleware(app, Permits(8))
    client = ("10.0.0.1", 40003)

    async def main() -> None:
        statuses, reached = [], []
        started = time.perf_counter()
        for _ in range(5):  # never waits: each request is sent as the last answer arrives
            statuses.append((await post(door, client))[0])
            reached.append(app.calls)
        took = time.perf_counter() - started
        # app 429, held 429, app 200 (the one after a held refusal is read), app 429, held 429
        assert statuses == [429, 429, 200, 429, 429] and reached == [1, 1, 2, 3, 3]
        assert 2 * RETRY_AFTER_S - 0.3 < took < 2 * RETRY_AFTER_S + 0.8  # two holds of one Retry-After each

    asyncio.run(main())
