"""What the HTTP routers share beyond dependencies: JSON responses, error docs, disconnect detection."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from fastapi import Request, Response

from service.errors import (
    BadRequest,
    InferenceError,
    InvalidRequest,
    ModelNotFound,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    RequestTimeout,
    ServiceError,
    UnsupportedMediaType,
    documented_statuses,
)
from service.schemas.common import ErrorResponse


def error_responses(*errors: type[ServiceError]) -> dict[int | str, dict[str, Any]]:
    """A route's OpenAPI ``responses`` for the errors it may answer (codes and texts from ``service.errors``)."""
    return {
        status: {"model": ErrorResponse, "description": description}
        for status, description in documented_statuses(*errors).items()
    }


TASK_ERROR_RESPONSES = error_responses(
    BadRequest,
    ModelNotFound,
    PayloadTooLarge,
    UnsupportedMediaType,
    InvalidRequest,
    Overloaded,
    InferenceError,
    NotReady,
    RequestTimeout,
)


def _to_builtin(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON, as Starlette's JSONResponse writes it; numpy scalars and arrays as numbers and lists."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=_to_builtin).encode()


def json_response(payload: Any) -> Response:
    """Serialise once (the response model documents the shape; validating it again costs time)."""
    return Response(content=encode_json(payload), media_type="application/json")


async def client_gone(request: Request) -> None:
    """Return once the client disconnects (the body was read already, so only ``http.disconnect`` is left)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
