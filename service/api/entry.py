"""The one entry of every inference route of every protocol: one pure ASGI layer, in front of FastAPI's router.

A POST to a route of ``service.api.protocols.PROTOCOLS`` is answered here, valid or not: the body is read,
checked (media type, JSON, the route's request model: the rules and words of FastAPI's body handling, see
``service.request_errors``) or handed to the route's decoder, run through ``service.inference.run_inference``
(given up when the client goes away) and answered in the protocol's shape; a ServiceError is answered in the
error shape of the request's path. Anything else goes on to the FastAPI app, which also declares these routes
(OpenAPI, /docs, generated clients) and answers other methods on their paths (405). An unexpected error goes up
to the app's outermost handler, as from a route. Every JSON body, whatever its protocol, is parsed by
``service.json_rules.parse_json``: one rule for encoding, nesting depth, item count, numbers and duplicate keys.

It sits inside the request metrics, API key, body reading (deadline, size, memory) and in-flight cap middlewares,
so they all apply: its body has arrived in full when it is called.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.routing import BaseRoute, compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.protocol import Decoded, Incoming, InferenceRoute
from service.errors import ServiceError
from service.http_io import header, read_body, route_path, send_body, send_error
from service.inference import InferenceRequest, run_inference
from service.registry import ModelRegistry
from service.request_errors import validated_json_body
from service.schemas.common import TaskRequest

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


def as_inference(request: TaskRequest) -> InferenceRequest:
    inputs, params = request.to_task()
    return InferenceRequest(
        task=request.task, inputs=inputs, params=params, model=request.model, explicit=request.given_fields
    )


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
            inference = as_inference(decoded.request)
            result = await run_inference(inference, state.registry, state.settings, client_gone, decoded.engine)
            reply = route.answer(decoded, result)
        except ServiceError as error:
            await send_error(send, error, scope["path"])
            return
        await send_body(send, 200, reply.content, reply.media_type, reply.headers)


def decode(
    route: InferenceRoute, scope: Scope, body: bytes, path_params: dict[str, str], registry: ModelRegistry
) -> Decoded:
    """The request in the task's terms: its JSON body validated as the route's model, or the route's decoder's."""
    content_type = header(scope["headers"], b"content-type")
    if route.body is not None:
        return Decoded(validated_json_body(route.body, body, content_type))
    assert route.decode is not None
    return route.decode(Incoming(body, content_type, scope["headers"], path_params), registry)
