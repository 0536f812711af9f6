"""Pure ASGI middlewares: request metrics (outermost), API keys, the in-flight cap and the request body size limit."""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.errors import Overloaded, PayloadTooLarge, ServiceError, Unauthorized
from service.http_io import body_too_large, read_body, replaying, send_error
from service.metrics import ServiceMetrics

# Paths an API key never guards: the health probes, the service's own and the Open Inference Protocol's.
OPEN_PATH_PREFIXES = ("/health", "/v2/health")
# The playground page and its files (the page asks for the key and sends it on its API calls); / redirects there.
PLAYGROUND_PATHS = frozenset({"/", "/playground"})
PLAYGROUND_PREFIX = "/playground/"


class MetricsMiddleware:
    """Counts requests by route template and status, their latency, and how many are in flight."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics, known_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.metrics = metrics
        self.known_paths = known_paths  # labels requests answered before routing (e.g. 413) by their path

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
        try:
            await self.app(scope, receive, send_with_status)
        finally:
            self.metrics.in_flight.dec()
            route = scope.get("route")
            template = getattr(route, "path", None)
            if template is None:
                template = scope["path"] if scope["path"] in self.known_paths else "unmatched"
            self.metrics.requests.labels(template, str(status)).inc()
            self.metrics.request_seconds.labels(template).observe(time.perf_counter() - started)


class ApiKeyMiddleware:
    """401 unless ``Authorization: Bearer KEY`` names one of ``keys``; health (and metrics, unless protected) stay open.

    Every key is compared, in constant time, whatever the outcome: the time taken tells nothing about the keys.
    Keys are never logged: the 401 names neither the key sent nor the ones expected.
    """

    def __init__(self, app: ASGIApp, keys: Sequence[str], protect_metrics: bool = False) -> None:
        self.app = app
        self.keys = [key.encode() for key in keys]
        self.open_prefixes = OPEN_PATH_PREFIXES if protect_metrics else (*OPEN_PATH_PREFIXES, "/metrics")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._open(scope["path"]) or self._authorised(scope):
            await self.app(scope, receive, send)
            return
        message = "missing or wrong API key: send 'Authorization: Bearer KEY'"
        await send_error(send, Unauthorized(message), scope["path"])

    def _open(self, path: str) -> bool:
        return path.startswith(self.open_prefixes) or path in PLAYGROUND_PATHS or path.startswith(PLAYGROUND_PREFIX)

    def _authorised(self, scope: Scope) -> bool:
        header = next((value for name, value in scope["headers"] if name == b"authorization"), b"")
        scheme, _, token = header.partition(b" ")
        matches = [hmac.compare_digest(token.strip(), key) for key in self.keys]
        return scheme.lower() == b"bearer" and any(matches)


class BodyLimitMiddleware:
    """413 for a body over ``max_body_bytes``: by its Content-Length, or while it is read.

    The body is read here in full (it is small by definition) and replayed to the app, so an
    over-long chunked body never reaches JSON parsing. Later ``receive`` calls go to the server
    (that is how the routes notice a client that went away).
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                await send_error(send, body_too_large(self.max_body_bytes), scope["path"])
                return
        try:
            body = await read_body(receive, self.max_body_bytes)
        except PayloadTooLarge as error:
            await send_error(send, error, scope["path"])
            return
        if body is not None:
            await self.app(scope, replaying(body, receive), send)


class ConcurrencyLimitMiddleware:
    """429 (with Retry-After) at once for a request over ``max_concurrent_requests`` in flight, before its body is read.

    GET, HEAD and OPTIONS requests (health, metrics, the model list, docs) are neither counted nor refused.
    The permit is held until the app has answered (or failed).
    """

    def __init__(self, app: ASGIApp, max_concurrent_requests: int) -> None:
        self.app = app
        self.max_concurrent_requests = max_concurrent_requests
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_concurrent_requests:
            limit = self.max_concurrent_requests
            error = Overloaded(f"{limit} requests in flight already (max_concurrent_requests)")
            await send_error(send, error, scope["path"])
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
