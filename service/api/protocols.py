"""The HTTP routes: the protocol adapters the service speaks (their inference routes, answered by
``service.api.entry.InferenceEntry``) and FastAPI's routers for everything else, in the order of the OpenAPI
document."""

from __future__ import annotations

from fastapi import APIRouter

from service.api import (
    batch,
    cohere,
    cohere_jobs,
    docs,
    health,
    hf,
    metrics,
    models,
    openai,
    playground,
    repository,
    rerank,
    shared_memory,
    tei,
    v1,
    v2,
)
from service.api.declared import declared_router
from service.api.entry import InferenceRoute, Protocol

PROTOCOLS: tuple[Protocol, ...] = (
    v1.PROTOCOL, rerank.PROTOCOL, cohere.PROTOCOL, openai.PROTOCOL, tei.PROTOCOL, v2.PROTOCOL, hf.PROTOCOL,
)  # fmt: skip

INFERENCE_ROUTES: tuple[InferenceRoute, ...] = tuple(route for protocol in PROTOCOLS for route in protocol.routes)

PROTOCOL_ROUTERS: tuple[APIRouter, ...] = tuple(
    router
    for protocol in PROTOCOLS
    for router in ((protocol.router,) if protocol.router is not None else ()) + (declared_router(protocol),)
)

ROUTERS: tuple[APIRouter, ...] = (
    models.router,
    *PROTOCOL_ROUTERS,
    batch.router,
    cohere_jobs.router,
    repository.router,
    shared_memory.router,
    health.router,
    metrics.router,
    docs.router,
    playground.root_router,
    playground.router,
)
