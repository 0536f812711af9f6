"""A request's line and headers are bounded (service.http_protocol, the protocol ``python -m service`` runs):
past ``max_header_bytes`` the connection gets 431 and is closed; bodies and later requests are not counted."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from service.http_protocol import bounded_headers_protocol
from tests.service.apptools import free_port

LIMIT = 4096


async def echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers 200 with the body's length."""
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = str(size).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}
    )
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    chosen = free_port()
    config = uvicorn.Config(
        echo_length, host="127.0.0.1", port=chosen, log_level="warning", http=bounded_headers_protocol(LIMIT)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server never started"
        time.sleep(0.01)
    yield chosen
    server.should_exit = True
    thread.join(10)


def request(path: str = "/", header_bytes: int = 0, body: bytes = b"") -> bytes:
    padding = f"X-Pad: {'a' * header_bytes}\r\n" if header_bytes else ""
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{padding}Content-Length: {len(body)}\r\n\r\n".encode() + body


def answers(port: int, *chunks: bytes, pause_s: float = 0.0) -> tuple[bytes, bool]:
    """What the server sent on one connection for ``chunks`` (sent ``pause_s`` apart), until it closes the
    connection or sends nothing more for 0.5 s; and whether it closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(pause_s)
        sock.settimeout(0.5)
        received = b""
        try:
            while data := sock.recv(65536):
                received += data
        except TimeoutError:
            return received, False
        except ConnectionResetError:
            pass
        return received, True


def assert_refused(answer: tuple[bytes, bool]) -> None:
    head, _, body = answer[0].partition(b"\r\n\r\n")
    assert answer[1], "the server closes the connection"
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"\r\nconnection: close" in head
    message = "the request line and headers are larger than 4096 bytes"
    assert json.loads(body) == {"error": {"type": "headers_too_large", "message": message}}


def test_headers_within_the_limit_are_served_and_each_request_counts_afresh(port: int) -> None:
    answer, closed = answers(port, request(header_bytes=3000) + request(header_bytes=3000, body=b"x" * 10))
    assert not closed and answer.count(b"HTTP/1.1 200 OK") == 2 and answer.endswith(b"\r\n\r\n10")


def test_a_body_is_not_counted_as_headers(port: int) -> None:
    assert answers(port, request(body=b"x" * 100_000))[0].endswith(b"\r\n\r\n100000")


def test_headers_past_the_limit_get_431_and_the_connection_closed(port: int) -> None:
    assert_refused(answers(port, request(header_bytes=100_000)))
    assert_refused(answers(port, request(path="/" + "p" * 5000)))


def test_headers_trickled_past_the_limit_get_431(port: int) -> None:
    head = request(header_bytes=6000)
    assert_refused(answers(port, *(head[start : start + 500] for start in range(0, len(head), 500)), pause_s=0.005))
