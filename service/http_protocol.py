"""uvicorn's httptools HTTP/1.1 protocol with a bound on a request's line and headers.

httptools takes a request line and headers of any size and uvicorn keeps them whole (a 16 MB header was answered
200), so a client could make the server hold any amount of memory before the app sees a request. Here the bytes
that arrive while a request's line and headers are read are counted (a read that also ends the head or starts the
next one is not: it holds a body or a new request), and a head is measured once complete; past ``max_header_bytes``
the connection gets 431 and is closed before the app sees the request: at most the limit plus one read from the
socket (256 KiB) is held. Bodies are bounded in the app (``service.middleware.BodyReadMiddleware``).

Its transport sends a response's head with its body in one ``send()``: uvicorn writes them separately, and on a
socket with Nagle off each write is a segment of its own, the reader woken for each (``python -m benchmarks.overhead
--profile``, ``benchmarks/results/overhead-before.md``: the head's write held a quarter of the event loop thread's
samples at c=32).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.bodies import encode_json
from service.errors import HeadersTooLarge


class CoalescedWrites:
    """A transport that holds a response's head until its body is written, then sends both in one write; a head
    with no body in the same event-loop step (a streamed response, 100 Continue) leaves at the step's end."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._head is not None:
            data, self._head = self._head + data, None
            self._transport.write(data)
        elif data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n"):
            self._head = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHeadersProtocol(HttpToolsProtocol):
    max_header_bytes = 64 << 10

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading_head = True  # a connection begins with a request line
        self.head_bytes = 0
        self.heads_ended = 0  # request heads completed so far
        self.refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        in_head, heads_ended = self.reading_head, self.heads_ended
        super().data_received(data)
        if in_head and self.reading_head and self.heads_ended == heads_ended:  # all of it went into one head
            self.head_bytes += len(data)
            if self.head_bytes > self.max_header_bytes:
                self.refuse()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_head = True
        self.head_bytes = 0

    def on_headers_complete(self) -> None:
        self.reading_head = False
        self.heads_ended += 1
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)  # ": " and CRLF
        if size > self.max_header_bytes:
            self.refuse()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self.refused:
            super().on_message_complete()

    def refuse(self) -> None:
        """431, and the connection closed: nothing more it sends is read."""
        self.refused = True
        error = HeadersTooLarge(f"the request line and headers are larger than {self.max_header_bytes} bytes")
        body = encode_json(error.body())
        head = [
            f"HTTP/1.1 {error.status_code} Request Header Fields Too Large",
            "content-type: application/json",
            f"content-length: {len(body)}",
            *(f"{name.lower()}: {value}" for name, value in error.headers().items()),
        ]
        self.transport.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        self.transport.close()


def bounded_headers_protocol(max_header_bytes: int) -> type[BoundedHeadersProtocol]:
    """The protocol class for uvicorn's ``http`` setting, bounding a request's line and headers to this many bytes."""
    return type("BoundedHeadersProtocol", (BoundedHeadersProtocol,), {"max_header_bytes": max_header_bytes})
