"""The hot path of the v1 task routes as one pure ASGI layer, past FastAPI's router and dependency solving.

A POST to a v1 task route with a JSON body that validates goes straight from here to ``run_task``'s work
(``run_inference``) and back: the same request model, the same inference, the same response bytes as the
route, with about a third of the per-request Python work of the FastAPI route (routing through a dozen ASGI
layers, building a ``Request``, solving dependencies). Anything else (another path or method, another media
type, JSON that does not parse or validate) goes on to the app with its body replayed, so every error a
client can cause is still answered by the route and the app's handlers, in their words. Errors raised while
inferring are answered as the app's handlers answer them (``ServiceError.body`` and ``headers``); an unexpected
one reaches the app's handler for those, as from a route.

It sits inside the request metrics, API key, in-flight cap and body size middlewares, so they all apply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.tasks import as_inference, task_answer
from service.errors import ServiceError
from service.inference import run_inference
from service.middleware import replaying, send_json
from service.request_errors import is_json_media_type
from service.schemas.common import TaskRequest

JSON_MEDIA_TYPE = b"application/json"


def json_content_type(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value == JSON_MEDIA_TYPE or is_json_media_type(value.decode("latin-1"))
    return False


class TaskFastPath:
    """``routes``: path -> (the app's route for it, its request model)."""

    def __init__(self, app: ASGIApp, routes: Mapping[str, tuple[Any, type[TaskRequest]]]) -> None:
        self.app = app
        self.routes = dict(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        hit = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if hit is None or not json_content_type(scope):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:  # the client left while sending
            return
        route, model = hit
        try:
            request = model.model_validate(json.loads(body))
        except (ValueError, ValidationError):  # not JSON, or not this route's shape: the route answers it
            await self.app(scope, replaying(body, receive), send)
            return
        scope["route"] = route  # the metrics label requests by their route's template, as routing would
        await self.answer(scope, receive, send, request)

    async def answer(self, scope: Scope, receive: Receive, send: Send, body: TaskRequest) -> None:
        state = scope["app"].state

        async def client_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        # a ServiceError is answered here (the app's handler for it sits inside, by the routes); anything else
        # goes up to the app's outermost handler for unexpected errors, as it would from a route
        try:
            result = await run_inference(as_inference(body), state.registry, state.settings, client_gone)
        except ServiceError as error:
            await send_json(send, error.status_code, error.body(scope["path"]), error.headers())
            return
        await send_json(send, 200, task_answer(result))


async def read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
