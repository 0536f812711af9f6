"""The inference routes declared to FastAPI: the OpenAPI document, /docs and generated clients see them as routes.

``service.api.entry.InferenceEntry`` answers every POST to them before FastAPI routes it; a declared route's
function only gives FastAPI its signature (path parameters, the JSON body's model) and is never called.
"""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter
from starlette.routing import compile_path

from service.api.entry import InferenceRoute, Protocol


class AnsweredByTheEntry(RuntimeError):
    """A declared inference route's function ran: the request reached the router past the inference entry."""


def declared_function(route: InferenceRoute) -> Any:
    async def answered_by_the_entry(**_: Any) -> None:
        raise AnsweredByTheEntry(f"POST {route.path} is answered by service.api.entry.InferenceEntry")

    _, _, convertors = compile_path(route.path)
    parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=str) for name in convertors]
    if route.body is not None:
        parameters.append(inspect.Parameter("body", inspect.Parameter.KEYWORD_ONLY, annotation=route.body))
    answered_by_the_entry.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return answered_by_the_entry


def declared_router(protocol: Protocol) -> APIRouter:
    """``protocol``'s inference routes as FastAPI routes, each documented as the route it stands for."""
    router = APIRouter()
    for route in protocol.routes:
        router.add_api_route(
            route.path,
            declared_function(route),
            methods=["POST"],
            name=route.operation,
            description=route.description,
            tags=[route.tag],
            response_model=route.response_model,
            responses=dict(route.responses),
            openapi_extra=route.openapi_extra,
        )
    return router
