"""The Open Inference Protocol's model repository extension over REST, as Triton serves it: list, load and unload
models while the service runs (``service.repository``). ``tritonclient``'s ``get_model_repository_index``,
``load_model`` and ``unload_model`` call these routes. Their bodies are optional and read whatever their media type
(tritonclient sends none); errors are ``{"error": message}`` as on every ``/v2`` path; API keys guard them as any
inference route."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ValidationError

from service.api.bodies import invalid_value, parse_json
from service.api.v2 import v2_error_responses
from service.errors import BadRequest, InvalidRequest, ModelNotFound
from service.oip.models import VERSION, check_load_parameters, check_unload_parameters
from service.processes import on_private_socket
from service.repository import READY, ModelRepository
from service.schemas.v2 import (
    V2RepositoryIndexRequest,
    V2RepositoryIndexResponse,
    V2RepositoryModel,
    V2RepositoryModelRequest,
    inline_json_schema,
)

router = APIRouter(prefix="/v2/repository", tags=["v2"])
Body = TypeVar("Body", bound=BaseModel)


def optional_body(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"schema": inline_json_schema(model)}
    return {"requestBody": {"required": False, "content": {"application/json": schema}}}


async def read_body(request: Request, model: type[Body]) -> Body:
    body = await request.body()
    try:
        return model.model_validate(parse_json(body) if body.strip() else {})
    except ValidationError as exc:
        raise invalid_value(exc, request.headers.get("content-type")) from None


def repository_of(request: Request) -> ModelRepository:
    return request.app.state.core.repository


@router.post(
    "/index",
    response_model=V2RepositoryIndexResponse,
    responses=v2_error_responses(BadRequest, InvalidRequest),
    openapi_extra=optional_body(V2RepositoryIndexRequest),
)
async def repository_index(request: Request) -> V2RepositoryIndexResponse:
    """Every model of the repository, its state, and why it is not served (``get_model_repository_index``)."""
    options = await read_body(request, V2RepositoryIndexRequest)
    models = repository_of(request).index(ready_only=options.ready)
    return V2RepositoryIndexResponse(
        [
            V2RepositoryModel(name=m.name, version=VERSION if m.state == READY else "", state=m.state, reason=m.reason)
            for m in models
        ]
    )


def model_route(action: str, done: str) -> Any:
    """``POST /v2/repository/models/{name}/<action>``: an empty 200 once ``done``."""
    return router.post(
        f"/models/{{name}}/{action}",
        response_class=Response,
        responses={200: {"description": done}, **v2_error_responses(BadRequest, InvalidRequest, ModelNotFound)},
        openapi_extra=optional_body(V2RepositoryModelRequest),
    )


@model_route("load", "Loaded and warmed up: it takes requests.")
async def load_model(name: str, request: Request) -> Response:
    """Load the model from its bundle folder, or load it again (``load_model``): it takes requests once warm, and a
    model of that name already served answers until then; a bundle that cannot be served leaves the models as they
    were (400 with the reason)."""
    options = await read_body(request, V2RepositoryModelRequest)
    check_load_parameters(options.parameters or {})
    await repository_of(request).load(name, everywhere=not on_private_socket(request.scope))
    return Response(status_code=200)


@model_route("unload", "Unloaded: requests already sent to it were answered.")
async def unload_model(name: str, request: Request) -> Response:
    """Stop serving the model (``unload_model``): new requests for it get 404, queued ones are answered first."""
    options = await read_body(request, V2RepositoryModelRequest)
    check_unload_parameters(options.parameters or {})
    await repository_of(request).unload(name, everywhere=not on_private_socket(request.scope))
    return Response(status_code=200)
