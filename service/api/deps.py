"""Typed dependencies and the shared request path of the four task routes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

import numpy as np
from fastapi import Depends, Request, Response

from service.errors import ClientClosedRequest, PayloadTooLarge
from service.metrics import ServiceMetrics
from service.registry import ModelRegistry
from service.schemas.common import ErrorResponse, TaskRequest
from service.settings import Settings

T = TypeVar("T")


# async: FastAPI runs plain ``def`` dependencies in a thread pool, a thread hop per request.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_registry(request: Request) -> ModelRegistry:
    return request.app.state.registry


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]


def error_doc(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


TASK_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: error_doc("Bad input, bad parameters, or an ambiguous or wrong-task model."),
    404: error_doc("No model by that name."),
    413: error_doc("Body larger than max_body_bytes, or more inputs than max_inputs_per_request."),
    422: error_doc("The body does not match the request schema."),
    429: error_doc("The model's queue is full; retry after the Retry-After header's seconds."),
    500: error_doc("Inference failed."),
    503: error_doc("The model is not ready or the service is shutting down."),
    504: error_doc("The request did not finish within the timeout."),
}


def _to_builtin(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_response(payload: Any) -> Response:
    """Serialise once (the response model documents the shape; validating it again costs time)."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=_to_builtin)
    return Response(content=body.encode(), media_type="application/json")


async def _cancel_on_disconnect(request: Request, task: asyncio.Task[Any], disconnected: list[bool]) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            disconnected.append(True)
            task.cancel()
            return


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client goes away first, cancel it (its queued rows are then dropped)."""
    current = asyncio.current_task()
    assert current is not None
    disconnected: list[bool] = []
    watcher = asyncio.get_running_loop().create_task(_cancel_on_disconnect(request, current, disconnected))
    try:
        return await work
    except asyncio.CancelledError:
        if disconnected:
            current.uncancel()
            raise ClientClosedRequest("client disconnected before the answer was ready") from None
        raise
    finally:
        watcher.cancel()


async def run_task(request: Request, body: TaskRequest, registry: ModelRegistry, settings: Settings) -> Response:
    # No shutting_down check here: after SIGTERM uvicorn accepts no new connections, and a request already
    # sent on an open one is answered; the engines refuse work only once the lifespan stops them.
    engine = registry.select(body.task, body.model)
    count = len(body.input_list())
    if count > settings.max_inputs_per_request:
        raise PayloadTooLarge(f"{count} inputs in one request; the limit is {settings.max_inputs_per_request}")
    inputs, params = body.to_task()
    results = await until_disconnected(request, engine.infer(inputs, params))
    return json_response({"model": engine.name, "results": results})
