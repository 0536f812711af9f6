"""The request path every protocol shares: pick the engine, check the request's size, run it, and give it up
when the client goes away.

A protocol's adapter (``service.api``) turns its body into an ``InferenceRequest`` and the ``InferenceResult``
into its response. Nothing here knows HTTP: a caller that can tell when its client disconnects passes
``client_gone``, a function whose awaitable returns when that happens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from service.errors import ClientClosedRequest, PayloadTooLarge
from service.registry import ModelRegistry
from service.settings import Settings

if TYPE_CHECKING:
    from service.engine import Engine

T = TypeVar("T")

ClientGone = Callable[[], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One request in the task handler's types: ``inputs`` (one per result) and ``params``."""

    task: str
    inputs: list[Any]
    params: Any
    model: str | None = None  # None: the only loaded model serving ``task``
    # The parameters the request gave, asked only of a model with request defaults (None: all were given).
    explicit: Callable[[], frozenset[str]] | None = None


@dataclass(frozen=True, slots=True)
class InferenceResult:
    model: str  # the engine that answered
    results: list[Any]  # one per input


async def run_inference(
    request: InferenceRequest,
    registry: ModelRegistry,
    settings: Settings,
    client_gone: ClientGone | None = None,
    engine: Engine | None = None,
) -> InferenceResult:
    """Select the engine (unless the protocol chose ``engine``: an OIP v2 path names it), enforce the task's input
    limit (``Settings.max_inputs_for``: ``max_inputs_per_request``, ``max_embedding_inputs`` for embeddings), infer;
    cancelled if ``client_gone`` returns first."""
    # No shutting_down check here: after SIGTERM uvicorn accepts no new connections, and a request already
    # sent on an open one is answered; the engines refuse work only once the lifespan stops them.
    if engine is None:
        engine = registry.select(request.task, request.model)
    count, limit = len(request.inputs), settings.max_inputs_for(request.task)
    if count > limit:
        setting = settings.named(settings.max_inputs_setting(request.task))
        raise PayloadTooLarge(f"{count} inputs in one request; the limit is {limit} ({setting})")
    work = engine.infer(request.inputs, engine.with_request_defaults(request.params, request.explicit))
    results = await (work if client_gone is None else until_disconnected(work, client_gone))
    return InferenceResult(engine.name, results)


async def until_disconnected(work: Awaitable[T], client_gone: ClientGone) -> T:
    """Await ``work``; if ``client_gone`` returns first, cancel it (its queued rows are then dropped)."""
    current = asyncio.current_task()
    assert current is not None
    disconnected: list[bool] = []

    async def cancel_when_gone(task: asyncio.Task[Any]) -> None:
        await client_gone()
        disconnected.append(True)
        task.cancel()

    watcher = asyncio.get_running_loop().create_task(cancel_when_gone(current))
    try:
        return await work
    except asyncio.CancelledError:
        if disconnected:
            current.uncancel()
            raise ClientClosedRequest("client disconnected before the answer was ready") from None
        raise
    finally:
        watcher.cancel()
