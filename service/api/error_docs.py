"""OpenAPI ``responses`` for the errors a route may answer (codes and texts from ``service.errors``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from service.errors import (
    BadRequest,
    BodyTimeout,
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


def error_responses(
    *errors: type[ServiceError], body: type[BaseModel] = ErrorResponse
) -> dict[int | str, dict[str, Any]]:
    """Status code -> the error ``body`` model and what the code means on this route."""
    return {
        status: {"model": body, "description": description}
        for status, description in documented_statuses(*errors).items()
    }


# what an inference route may answer, in the order their descriptions are joined when they share a status
TASK_ERRORS: tuple[type[ServiceError], ...] = (
    BadRequest,
    ModelNotFound,
    BodyTimeout,
    PayloadTooLarge,
    UnsupportedMediaType,
    InvalidRequest,
    Overloaded,
    InferenceError,
    NotReady,
    RequestTimeout,
)
TASK_ERROR_RESPONSES = error_responses(*TASK_ERRORS)
