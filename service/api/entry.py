"""The one entry of every inference route of every protocol: one pure ASGI layer, in front of FastAPI's router.

A POST to a route of ``service.api.protocols.PROTOCOLS`` is answered here, valid or not: the body is read, checked
(media type, JSON, the route's request model: the rules and words of FastAPI's body handling, see
``service.api.bodies``) or handed to
the route's decoder, run through ``service.core.run_inference`` (given up when the client goes away) and answered in
the protocol's shape; a ServiceError is answered in the error shape of the request's path. Anything else goes on to
the FastAPI app, which also declares these routes (OpenAPI, /docs, generated clients) and answers other methods on
their paths (405). An unexpected error goes up to the app's outermost handler, as from a route. Every JSON body,
whatever its protocol, is parsed by ``parse_json``: one rule for encoding, nesting depth, item count, numbers and
duplicate keys.

It sits inside the request metrics, API key, body reading (deadline, size, memory) and in-flight cap middlewares,
so they all apply: its body has arrived in full when it is called.

What a protocol adapter is, too: its inference routes (``InferenceRoute``), each with its path, its OpenAPI
documentation, how its body becomes the task's request (``Decoded``) and how the task's answer becomes its response
(``Reply``); ``service.api.declared`` declares them to FastAPI for the OpenAPI document. And the bytes in and out
over ASGI (no framework), for the entry and the middlewares: responses are compact UTF-8 JSON, as Starlette's
JSONResponse writes them, so a body written here is byte for byte the body a FastAPI route would have answered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.bodies import JSON_MEDIA_TYPE, encode_json, validated_json_body
from service.api.error_docs import TASK_ERROR_RESPONSES
from service.core import InferenceRequest, InferenceResult, ModelRegistry, run_inference
from service.errors import PayloadTooLarge, ServiceError
from service.schemas.common import TaskRequest

if TYPE_CHECKING:
    from service.engine import Engine
    from service.oip.shared_memory import SharedMemoryRegions


async def send_body(
    send: Send, status: int, content: bytes, media_type: str, headers: Mapping[str, str] | None = None
) -> None:
    """A whole response: ``content`` with its length, media type and ``headers``."""
    raw_headers = [(b"content-length", str(len(content)).encode()), (b"content-type", media_type.encode())]
    raw_headers += [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": content})


async def send_json(send: Send, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
    await send_body(send, status, encode_json(payload), JSON_MEDIA_TYPE, headers)


async def send_error(send: Send, error: ServiceError, path: str = "", close: bool = False) -> None:
    """Answer with ``error``: its status, its body for a request to ``path``, its headers (Retry-After, ...);
    ``close``: the server closes the connection after it (the body was not read in full)."""
    headers = {**error.headers(), "Connection": "close"} if close else error.headers()
    await send_json(send, error.status_code, error.body(path), headers)


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client left while sending it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def body_too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is larger than {max_bytes} bytes")


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first gives ``body`` again (read already), then defers to the server (disconnects)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case), as Starlette's ``request.headers.get`` gives it."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def route_path(scope: Scope) -> str:
    """The path the app's routes match: ``path`` less the ``root_path`` the app is mounted at (Starlette's rule)."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    if path == root:
        return ""
    return path[len(root) :] if path[len(root)] == "/" else path


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request to a route that reads its body itself: the body, its headers and the path's parameters."""

    body: bytes
    content_type: str | None
    headers: list[tuple[bytes, bytes]]
    path_params: dict[str, str]
    shared_memory: SharedMemoryRegions | None = None  # the server's registered regions (OIP tensors may lie there)

    def header(self, name: str) -> str | None:
        return header(self.headers, name.lower().encode())


@dataclass(frozen=True, slots=True)
class Decoded:
    """A request in the task's terms: its task request (validated), the engine when the protocol chose it (a v2 path
    names its model; else the registry selects by the request's task and model), and what the answer needs."""

    request: TaskRequest
    engine: Engine | None = None
    context: Any = None
    timeout_s: float | None = None  # the request's own deadline (OIP's timeout parameter), None: the server's


@dataclass(frozen=True, slots=True)
class Reply:
    content: bytes
    media_type: str = JSON_MEDIA_TYPE
    headers: Mapping[str, str] = field(default_factory=dict)


def json_reply(payload: Any) -> Reply:
    return Reply(encode_json(payload))


Decoder = Callable[[Incoming, ModelRegistry], Decoded]
Answer = Callable[[Decoded, InferenceResult], Reply | Any]  # a Reply, or a JSON value answered as JSON


@dataclass(frozen=True)
class InferenceRoute:
    """One POST route. Its body is read by ``decode`` when it has one (the route's own format, its OpenAPI body from
    ``body`` or ``openapi_extra``), else it is ``body``, a JSON body read and validated as FastAPI reads a route's
    body parameter."""

    path: str  # a path template: /v1/embeddings, /v2/models/{name}/infer
    operation: str  # the operation's name: OpenAPI's operationId and summary are made from it
    description: str
    tag: str
    response_model: Any
    answer: Answer
    body: type[TaskRequest] | None = None
    decode: Decoder | None = None
    responses: Mapping[int | str, dict[str, Any]] = field(default_factory=lambda: TASK_ERROR_RESPONSES)
    openapi_extra: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.body is None and self.decode is None:
            raise ValueError(f"{self.path}: give a JSON body model, a decoder or both")


@dataclass(frozen=True)
class Protocol:
    """A protocol's inference routes, and the routes of it FastAPI serves itself (health, metadata), if any."""

    name: str
    routes: tuple[InferenceRoute, ...]
    router: APIRouter | None = None


Matched = tuple[InferenceRoute, BaseRoute, dict[str, str]]


class RouteTable:
    """The inference routes by path: fixed paths by lookup, templated ones (``{name}``) by their patterns."""

    def __init__(self, routes: Iterable[tuple[InferenceRoute, BaseRoute]]) -> None:
        self.fixed: dict[str, tuple[InferenceRoute, BaseRoute]] = {}
        self.templated: list[tuple[re.Pattern[str], InferenceRoute, BaseRoute]] = []
        for route, declared in routes:
            if "{" in route.path:
                pattern, _, _ = compile_path(route.path)
                self.templated.append((pattern, route, declared))
            else:
                self.fixed[route.path] = (route, declared)

    def match(self, path: str) -> Matched | None:
        fixed = self.fixed.get(path)
        if fixed is not None:
            return fixed[0], fixed[1], {}
        for pattern, route, declared in self.templated:
            found = pattern.match(path)
            if found is not None:
                return route, declared, found.groupdict()
        return None


class InferenceEntry:
    """``routes``: each inference route with the route FastAPI declares for it (requests are labelled by it)."""

    def __init__(self, app: ASGIApp, routes: Iterable[tuple[InferenceRoute, BaseRoute]]) -> None:
        self.app = app
        self.table = RouteTable(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self.table.match(route_path(scope)) if scope["type"] == "http" and scope["method"] == "POST" else None
        if matched is None:
            await self.app(scope, receive, send)
            return
        route, declared, path_params = matched
        scope["route"] = declared  # what routing would set: the metrics label requests by its path template
        body = await read_body(receive)
        if body is None:  # the client left while sending
            return
        state = scope["app"].state

        async def client_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        try:
            decoded = decode(route, scope, body, path_params, state.registry)
            inputs, params = decoded.request.to_task()  # here, not in the core: one hand-off fewer per request
            request = decoded.request
            inference = InferenceRequest(
                request.task, inputs, params, request.model, request.given_fields, decoded.timeout_s
            )
            result = await run_inference(inference, state.registry, state.settings, client_gone, decoded.engine)
            reply = route.answer(decoded, result)
            if not isinstance(reply, Reply):
                reply = Reply(encode_json(reply))
        except ServiceError as error:
            await send_error(send, error, scope["path"])
            return
        await send_body(send, 200, reply.content, reply.media_type, reply.headers)


def decode(
    route: InferenceRoute, scope: Scope, body: bytes, path_params: dict[str, str], registry: ModelRegistry
) -> Decoded:
    """The request in the task's terms: its JSON body validated as the route's model, or the route's decoder's."""
    content_type = header(scope["headers"], b"content-type")
    if route.decode is not None:
        regions = scope["app"].state.core.shared_memory
        return route.decode(Incoming(body, content_type, scope["headers"], path_params, regions), registry)
    assert route.body is not None
    return Decoded(validated_json_body(route.body, body, content_type))
