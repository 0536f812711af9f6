"""HTTP routes: the protocols' inference routes (``protocols.PROTOCOLS``, answered by ``entry.InferenceEntry``)
and FastAPI's routers for everything else, in the order of the OpenAPI document."""

from fastapi import APIRouter

from service.api import docs, health, metrics, models, playground
from service.api.declared import declared_router
from service.api.protocols import PROTOCOLS

PROTOCOL_ROUTERS: tuple[APIRouter, ...] = tuple(
    router
    for protocol in PROTOCOLS
    for router in ((protocol.router,) if protocol.router is not None else ()) + (declared_router(protocol),)
)

ROUTERS: tuple[APIRouter, ...] = (
    models.router,
    *PROTOCOL_ROUTERS,
    health.router,
    metrics.router,
    docs.router,
    playground.root_router,
    playground.router,
)

__all__ = ["PROTOCOL_ROUTERS", "ROUTERS"]
