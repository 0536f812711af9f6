"""Request bodies are read in full, bounded in time and memory, before a request takes an in-flight permit
(service.middleware.BodyReadMiddleware, issue 31): a slow sender gets 408 and its connection closed, and holds
no permit while it sends, so slow senders at twice the in-flight cap do not lock a normal client out.

The ASGI-level tests drive the app with clients that send part of a body and then nothing (no sockets, small
timeouts); one test on a real server checks what a socket sees: the 408 and then the connection closed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from httpx import AsyncClient
from starlette.types import ASGIApp, Message

from service.middleware import BodyReadMiddleware, ConcurrencyLimitMiddleware
from service.settings import Settings
from tests.service.apptools import free_port, gate_engine, real_server, serving, wait_for
from tests.service.tiny_models import TinyModel

ROUTE = "/v1/text-classification"
V2_ROUTE = "/v2/models/sst/infer"
DEADLINE_S = 0.4
CAP = 2


class PartialSender:
    """An ASGI client that sends ``parts`` of a body of ``length`` bytes, then what ``more`` gives it, or leaves;
    ``whole``: its parts are the whole body."""

    def __init__(
        self,
        app: ASGIApp,
        path: str = ROUTE,
        parts: tuple[bytes, ...] = (b"{",),
        length: int = 100,
        whole: bool = False,
    ) -> None:
        self.coming: asyncio.Queue[Message | None] = asyncio.Queue()
        for index, part in enumerate(parts, 1):
            self.coming.put_nowait({"type": "http.request", "body": part, "more_body": not whole or index < len(parts)})
        self.messages: list[Message] = []
        headers = [
            (b"host", b"test"),
            (b"content-type", b"application/json"),
            (b"content-length", str(length).encode()),
        ]
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"", "headers": headers,
            "client": ("127.0.0.1", 50000), "server": ("test", 80),
        }  # fmt: skip
        self.task = asyncio.ensure_future(app(scope, self.receive, self.send))

    def more(self, part: bytes) -> None:
        self.coming.put_nowait({"type": "http.request", "body": part, "more_body": True})

    def leave(self) -> None:
        self.coming.put_nowait(None)

    async def receive(self) -> Message:
        message = await self.coming.get()
        return {"type": "http.disconnect"} if message is None else message

    async def send(self, message: Message) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int | None:
        return self.messages[0]["status"] if self.messages else None

    def headers(self) -> dict[bytes, bytes]:
        return dict(self.messages[0]["headers"])

    def body(self) -> Any:
        return json.loads(b"".join(message.get("body", b"") for message in self.messages[1:]))


def layer(app: FastAPI, kind: type[Any]) -> Any:
    """The middleware of ``kind`` in the app's built stack."""
    node: Any = app.middleware_stack
    while not isinstance(node, kind):
        node = node.app
    return node


def settings_for(model: TinyModel, **overrides: Any) -> Settings:
    given: dict[str, Any] = {"body_timeout_s": DEADLINE_S, **overrides}
    return Settings(
        models=[f"sst={model.bundle}"],
        intra_op_threads=1,
        model_workers=1,
        max_batch_size=1,
        max_concurrent_requests=CAP,
        **given,
    )


@asynccontextmanager
async def app_under_test(settings: Settings) -> AsyncIterator[tuple[FastAPI, AsyncClient, Any, Any]]:
    """The app, a client, its body reader and its in-flight cap."""
    async with serving(settings) as (app, client):
        yield app, client, layer(app, BodyReadMiddleware), layer(app, ConcurrencyLimitMiddleware)


def test_slow_senders_at_twice_the_cap_hold_no_permit_and_get_408_with_the_connection_closed(
    text_classification_model: TinyModel,
) -> None:
    async def main() -> None:
        async with app_under_test(settings_for(text_classification_model)) as (app, client, reader, cap):
            started = time.perf_counter()
            slow = [PartialSender(app) for _ in range(2 * CAP)] + [PartialSender(app, V2_ROUTE, (b'{"in',))]
            await wait_for(lambda: reader.readers == len(slow))
            assert cap.in_flight == 0
            for _ in range(3):  # more normal requests than the cap, one after another, while every slow one sends
                response = await client.post(ROUTE, json={"inputs": "a fine film"})
                assert response.status_code == 200, response.text
            assert all(sender.status is None for sender in slow)
            await asyncio.gather(*(sender.task for sender in slow))
            elapsed = time.perf_counter() - started
            assert DEADLINE_S <= elapsed < DEADLINE_S + 1.0
            assert [sender.status for sender in slow] == [408] * len(slow)
            assert all(sender.headers()[b"connection"] == b"close" for sender in slow)
            message = "the body did not arrive in full within 0.4 s (body_timeout_s)"
            assert slow[0].body() == {"error": {"type": "body_timeout", "message": message}}
            assert slow[-1].body() == {"error": message}  # the v2 protocol's error shape
            assert (reader.readers, reader.buffered, cap.in_flight) == (0, 0, 0)
            metrics = (await client.get("/metrics")).text
            assert f'bertserve_requests_total{{route="{ROUTE}",status="408"}} {2 * CAP}.0' in metrics

    asyncio.run(main())


def test_the_permit_counts_requests_whose_body_is_complete(text_classification_model: TinyModel) -> None:
    async def main() -> None:
        async with app_under_test(settings_for(text_classification_model)) as (app, client, reader, cap):
            runner, gate = gate_engine(app.state.registry.engines["sst"])
            held = [asyncio.ensure_future(client.post(ROUTE, json={"inputs": text})) for text in ("one", "two")]
            await wait_for(lambda: cap.in_flight == CAP and runner.entered.is_set())
            slow = [PartialSender(app) for _ in range(3)]
            await wait_for(lambda: reader.readers == 3)
            assert cap.in_flight == CAP
            refused = await client.post(ROUTE, json={"inputs": "three"})
            assert refused.status_code == 429 and "max_concurrent_requests" in refused.text
            gate.set()
            assert [response.status_code for response in await asyncio.gather(*held)] == [200, 200]
            assert cap.in_flight == 0
            await asyncio.gather(*(sender.task for sender in slow))
            assert [sender.status for sender in slow] == [408, 408, 408] and cap.in_flight == 0

    asyncio.run(main())


def test_reading_slots_and_buffered_bytes_are_bounded_but_a_body_sent_whole_needs_neither(
    text_classification_model: TinyModel,
) -> None:
    # the slow bodies must outlast a whole request's answer (its model run, slower on a busy machine: a full run
    # once saw the first slow body time out at 0.4 s before its next byte was sent)
    settings = settings_for(text_classification_model, max_body_readers=2, max_body_buffer_bytes=10, body_timeout_s=2.0)

    async def main() -> None:
        async with app_under_test(settings) as (app, _, reader, _):
            slow = [PartialSender(app, parts=(b"{",)), PartialSender(app, parts=(b'{"inputs"',))]
            await wait_for(lambda: reader.readers == 2)
            assert reader.buffered == 10
            third = PartialSender(app)
            await third.task  # no slot left: answered at once
            assert third.status == 429 and third.headers()[b"connection"] == b"close"
            assert "max_body_readers" in third.body()["error"]["message"]
            whole = b'{"inputs": "sent with its headers"}'
            sent_whole = PartialSender(app, parts=(whole,), length=len(whole), whole=True)
            await sent_whole.task
            assert sent_whole.status == 200, sent_whole.body()
            slow[0].more(b"x")  # one more byte would hold 11 of 10
            await asyncio.gather(*(sender.task for sender in slow))
            assert slow[0].status == 429 and "max_body_buffer_bytes" in slow[0].body()["error"]["message"]
            assert slow[1].status == 408
            assert (reader.readers, reader.buffered) == (0, 0)

    asyncio.run(main())


def test_a_client_that_leaves_mid_body_frees_its_slot_and_gets_nothing(text_classification_model: TinyModel) -> None:
    async def main() -> None:
        async with app_under_test(settings_for(text_classification_model)) as (app, _, reader, cap):
            leaving = PartialSender(app, parts=(b"{", b'"inputs"'))
            await wait_for(lambda: reader.readers == 1 and reader.buffered == 9)
            leaving.leave()
            await leaving.task
            assert leaving.messages == [] and (reader.readers, reader.buffered, cap.in_flight) == (0, 0, 0)

    asyncio.run(main())


def test_a_body_too_large_by_its_length_is_413_with_the_connection_closed(text_classification_model: TinyModel) -> None:
    async def main() -> None:
        async with app_under_test(settings_for(text_classification_model, max_body_bytes=64)) as (app, *_):
            claimed = PartialSender(app, length=65)
            await claimed.task
            assert claimed.status == 413 and claimed.headers()[b"connection"] == b"close"
            grown = PartialSender(app, parts=(b"{" * 40, b"[" * 40), length=60)  # says 60, sends 80
            await grown.task
            assert grown.status == 413 and grown.headers()[b"connection"] == b"close"

    asyncio.run(main())


def test_a_real_socket_gets_the_408_and_then_its_connection_closed(text_classification_model: TinyModel) -> None:
    settings = settings_for(text_classification_model, port=free_port())
    with real_server(settings) as url, socket.create_connection(("127.0.0.1", settings.port), timeout=5) as sock:
        head = f"POST {ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        started = time.perf_counter()
        sock.sendall(head.encode())
        answer = b""
        while chunk := sock.recv(65536):  # until the server closes the connection
            answer += chunk
        elapsed = time.perf_counter() - started
        assert url.startswith("http://127.0.0.1:")
        assert answer.startswith(b"HTTP/1.1 408 ") and b"\r\nconnection: close\r\n" in answer.lower()
        assert answer.endswith(b'"type":"body_timeout","message":"the body did not arrive in full within 0.4 s '
                               b'(body_timeout_s)"}}')  # fmt: skip
        assert DEADLINE_S <= elapsed < DEADLINE_S + 1.0
