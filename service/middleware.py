"""Pure ASGI middlewares: request metrics, access line and trace span (outermost), API keys, request bodies read in
full, the in-flight cap.
Their bytes in and out (``read_body``, ``send_error``, ...) are ``service.api.entry``'s, the inference entry's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.entry import body_too_large, header, replaying, send_error
from service.batch.cohere_jobs import PART_PATH
from service.core import Permits, key_authorised
from service.errors import BodyTimeout, Overloaded, ServiceError, Unauthorized
from service.metrics import ServiceMetrics, log_access
from service.processes import on_private_socket
from service.tracing import ACCESS_RECORD, RequestRecord, Tracing

TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})  # W3C trace context: what a span continues
# Paths an API key never guards: the health probes, the service's own and the Open Inference Protocol's; and
# dataset parts' signed URLs (their signature is their credential, as Cohere's: its client fetches them keyless).
OPEN_PATH_PREFIXES = ("/health", "/v2/health", PART_PATH)


def open_path_prefixes(protect_metrics: bool) -> tuple[str, ...]:
    """The paths an API key does not guard: health, and metrics unless protected."""
    return OPEN_PATH_PREFIXES if protect_metrics else (*OPEN_PATH_PREFIXES, "/metrics")


# The playground page and its files (the page asks for the key and sends it on its API calls); / redirects there.
PLAYGROUND_PATHS = frozenset({"/", "/playground"})
PLAYGROUND_PREFIX = "/playground/"
BODILESS_METHODS = ("GET", "HEAD", "OPTIONS")  # neither read nor counted


def infer_model(path: str) -> str | None:
    """The model an Open Inference Protocol infer path names (``/v2/models/{name}[/versions/{v}]/infer``): what a
    request's trace settings follow (``service.trace_settings``)."""
    parts = path.split("/")
    if parts[-1] != "infer" or parts[1:3] != ["v2", "models"]:
        return None
    if len(parts) == 5 or (len(parts) == 7 and parts[4] == "versions"):
        return parts[3]
    return None


class MetricsMiddleware:
    """Counts requests by route template and status, their latency, and how many are in flight."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServiceMetrics,
        known_paths: frozenset[str] = frozenset(),
        access_log: bool = False,
        tracing: Tracing | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.access_log = access_log  # one console line per request (service.metrics)
        self.tracing = tracing  # a server span per request (service.tracing), when configured
        self.known_paths = known_paths  # labels requests answered before routing (e.g. 413) by their path
        self._labelled: dict[tuple[str, int], tuple[Any, Any]] = {}  # (route template, status) -> its metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = ServiceError.status_code  # what the server answers if the app raises before responding
        started = time.perf_counter()

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        span = None
        if self.tracing is None:
            record = RequestRecord() if self.access_log else None
        else:
            carrier = {key.decode(): value.decode("latin-1") for key, value in scope["headers"] if key in TRACE_HEADERS}
            path = scope["path"]
            span = self.tracing.begin(f"{scope['method']} {path}", carrier, {"url.path": path}, infer_model(path))
            record = self.tracing.record_for(span, self.access_log)
        opened = ACCESS_RECORD.set(record)
        try:
            await self.app(scope, receive, send_with_status)
        finally:
            ACCESS_RECORD.reset(opened)
            self.metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path", None)
            if template is None:
                template = scope["path"] if scope["path"] in self.known_paths else "unmatched"
            counted = self._labelled.get((template, status))
            if counted is None:  # a metric's child per label values, looked up once (labels() takes a lock)
                counted = (
                    self.metrics.requests.labels(template, str(status)),
                    self.metrics.request_seconds.labels(template),
                )
                self._labelled[(template, status)] = counted
            elapsed = time.perf_counter() - started
            counted[0].inc()
            counted[1].observe(elapsed)
            if span is not None and self.tracing is not None:
                attributes = {"http.request.method": scope["method"], "http.route": template,
                              "http.response.status_code": status}  # fmt: skip
                self.tracing.end(span, record, attributes, error=status >= 500)
            if record is not None and self.access_log:
                log_access(scope["method"], scope["path"], status, elapsed, record)


class ApiKeyMiddleware:
    """401 unless ``Authorization: Bearer KEY`` names one of ``keys``; health (and metrics, unless protected) stay open.

    Every key is compared, in constant time, whatever the outcome: the time taken tells nothing about the keys.
    Keys are never logged: the 401 names neither the key sent nor the ones expected.
    """

    def __init__(self, app: ASGIApp, keys: Sequence[str], protect_metrics: bool = False) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        self.open_prefixes = open_path_prefixes(protect_metrics)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._open(scope["path"]) or self._authorised(scope) or on_private_socket(scope):
            await self.app(scope, receive, send)
            return
        message = "missing or wrong API key: send 'Authorization: Bearer KEY'"
        await send_error(send, Unauthorized(message), scope["path"])

    def _open(self, path: str) -> bool:
        return path.startswith(self.open_prefixes) or path in PLAYGROUND_PATHS or path.startswith(PLAYGROUND_PREFIX)

    def _authorised(self, scope: Scope) -> bool:
        header = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        return key_authorised(header, self.keys)


class BodyReadMiddleware:
    """Reads every request body in full before the app sees the request: bounded in time, size and memory.

    - 413 for a body over ``max_body_bytes``, by its Content-Length or once that many bytes have come;
    - 408 for a body not in full within ``body_timeout_s`` of the request's headers;
    - a body that arrives in one message (as a small request's does, with its headers) is read at once; a body that
      comes in parts needs one of ``max_body_readers`` reading slots and may hold at most what is left of
      ``max_body_buffer_bytes`` (the parts of every body being read, together): 429 when either is taken.

    An answer given before the body has arrived in full closes the connection (``Connection: close``): a client
    still sending gets nothing more read from it. The body is then replayed to the app, which is how the in-flight
    cap inside this layer counts only requests whose body is complete. Later ``receive`` calls go to the server
    (that is how the routes notice a client that went away).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_timeout_s: float,
        max_body_readers: int,
        max_body_buffer_bytes: int,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.max_body_readers = max_body_readers
        self.max_body_buffer_bytes = max_body_buffer_bytes
        self.readers = 0  # bodies being read in parts
        self.buffered = 0  # bytes of them held here

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in BODILESS_METHODS:
            await self.app(scope, receive, send)
            return
        declared = header(scope["headers"], b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await send_error(send, body_too_large(self.max_body_bytes), scope["path"], close=True)
            return
        reading = time.perf_counter()
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await self._read(receive)
        except TimeoutError:
            late = BodyTimeout(f"the body did not arrive in full within {self.body_timeout_s:g} s (body_timeout_s)")
            await send_error(send, late, scope["path"], close=True)
            return
        except ServiceError as error:
            await send_error(send, error, scope["path"], close=True)
            return
        if body is not None:
            record = ACCESS_RECORD.get()
            if record is not None and record.spans is not None:
                record.spans.append(("read body", reading, time.perf_counter(), {"http.request.body.size": len(body)}))
            await self.app(scope, replaying(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body; None if the client left while sending it."""
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        first: bytes = message.get("body", b"")
        if len(first) > self.max_body_bytes:
            raise body_too_large(self.max_body_bytes)
        if not message.get("more_body", False):
            return first
        if self.readers >= self.max_body_readers:
            raise Overloaded(f"{self.readers} request bodies are being read already (max_body_readers)")
        self.readers += 1
        held = 0
        try:
            chunks = [first]
            held = self._hold(len(first), held)
            while message.get("more_body", False):
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                if held + len(chunk) > self.max_body_bytes:
                    raise body_too_large(self.max_body_bytes)
                held = self._hold(len(chunk), held)
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            self.readers -= 1
            self.buffered -= held

    def _hold(self, size: int, held: int) -> int:
        """Count ``size`` more bytes held for a body that holds ``held``; 429 past ``max_body_buffer_bytes``."""
        if self.buffered + size > self.max_body_buffer_bytes:
            held_now, limit = self.buffered, self.max_body_buffer_bytes
            raise Overloaded(f"{held_now} bytes of request bodies held already (max_body_buffer_bytes: {limit})")
        self.buffered += size
        return held + size


RETRY_AFTER_GRACE_S = 0.1  # a client that waited Retry-After out is never early by clock rounding alone
MAX_WATCHED_CONNECTIONS = 4096  # past this many, connections whose Retry-After has passed are forgotten


class ConcurrencyLimitMiddleware:
    """The door: 429 (with Retry-After) at once for a request over ``max_concurrent_requests`` in flight, before any
    model work; and, with ``enforce_retry_after``, Retry-After kept per connection.

    It sits inside ``BodyReadMiddleware``: a request is counted once its body is complete, so a client that is slow
    to send holds no permit. GET, HEAD and OPTIONS requests (health, metrics, the model list, docs) are neither
    counted nor refused. The permit (the core's, shared with the other transports) is held until the app has answered
    (or failed).

    Retry-After kept: a request sent on a connection before the Retry-After of that connection's last 429 has passed
    waits out the rest of it, holding no permit and no CPU, and is then answered 429 unread; the request after it is
    read. A client that retries at once (ignoring Retry-After) thus sends one request per Retry-After to the app, not
    thousands of refusals a second that each cost the model the CPU of parsing a request. A connection is told apart
    by its client address and port (none behind a trusted proxy, which reports port 0: then nothing is kept).
    """

    def __init__(self, app: ASGIApp, permits: Permits, enforce_retry_after: bool = True) -> None:
        self.app = app
        self.permits = permits
        self.enforce_retry_after = enforce_retry_after
        self.retry_at: dict[tuple[str, int], float] = {}  # connection -> when its last 429's Retry-After ends

    @property
    def in_flight(self) -> int:
        return self.permits.held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in BODILESS_METHODS:
            await self.app(scope, receive, send)
            return
        connection = _connection(scope) if self.enforce_retry_after else None
        if connection is not None:
            if connection in self.retry_at and await self._waited_out(connection):
                # Not noted as a new Retry-After: the client's next request is read. Noting it would hold every
                # request of a client that sends at once for good, and its connection would carry no work again.
                await send_error(send, RETRY_AFTER_IGNORED, scope["path"])
                return
            send = self._watching(connection, send)
        permits = self.permits  # counted here inline: two calls into the core per request cost more than the count
        if permits.held >= permits.limit:
            await send_error(send, permits.refusal(), scope["path"])
            return
        permits.held += 1
        try:
            await self.app(scope, receive, send)
        finally:
            permits.held -= 1

    async def _waited_out(self, connection: tuple[str, int]) -> bool:
        """Whether the request came early (then it has now waited until its connection's Retry-After passed)."""
        remaining = self.retry_at.pop(connection) - time.monotonic()
        if remaining <= RETRY_AFTER_GRACE_S:
            return False
        await asyncio.sleep(remaining)
        return True

    def _watching(self, connection: tuple[str, int], send: Send) -> Send:
        async def send_noting_retry_after(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 429:
                value = header(message.get("headers", []), b"retry-after")
                if value is not None and value.isdigit():
                    self._remember(connection, time.monotonic() + int(value))
            await send(message)

        return send_noting_retry_after

    def _remember(self, connection: tuple[str, int], until: float) -> None:
        if len(self.retry_at) >= MAX_WATCHED_CONNECTIONS:
            now = time.monotonic()
            self.retry_at = {known: end for known, end in self.retry_at.items() if end > now}
        self.retry_at[connection] = until


RETRY_AFTER_IGNORED = Overloaded(
    "this connection sent a request before the Retry-After of its last 429 had passed; it was held until then and "
    "not read: wait Retry-After seconds after a 429 (enforce_retry_after)"
)


def _connection(scope: Scope) -> tuple[str, int] | None:
    client = scope.get("client")
    if not client or not client[1]:
        return None
    return (client[0], client[1])
