"""The service's closed error hierarchy and its one mapping to HTTP status codes.

Every error response has the body ``{"error": {"type": ..., "message": ...}}``; ``type`` is the
class's ``error_type``. Engines raise these without knowing about HTTP; ``app.py`` maps them.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    """Base of every error the service reports to a client."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        return {}

    def body(self) -> dict[str, Any]:
        return error_body(self.error_type, self.message)


class BadRequest(ServiceError):
    status_code = 400
    error_type = "bad_request"


class ModelNotFound(ServiceError):
    status_code = 404
    error_type = "model_not_found"


class PayloadTooLarge(ServiceError):
    status_code = 413
    error_type = "payload_too_large"


class Overloaded(ServiceError):
    """The model's queue is full; the client should retry after ``retry_after_s`` seconds."""

    status_code = 429
    error_type = "overloaded"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, int(retry_after_s))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class NotReady(ServiceError):
    status_code = 503
    error_type = "not_ready"


class RequestTimeout(ServiceError):
    status_code = 504
    error_type = "timeout"


class InferenceError(ServiceError):
    status_code = 500
    error_type = "inference_error"


def error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"error": {"type": error_type, "message": message}}


# Status codes that do not come from a ServiceError (FastAPI validation, routing) get these types.
HTTP_ERROR_TYPES: dict[int, str] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "overloaded",
    500: "internal_error",
    503: "not_ready",
    504: "timeout",
}


def http_error_type(status_code: int) -> str:
    return HTTP_ERROR_TYPES.get(status_code, "client_error" if status_code < 500 else "server_error")


class ClientClosedRequest(ServiceError):
    """The client went away before its answer was ready (nginx's 499); nobody reads this response."""

    status_code = 499
    error_type = "client_closed_request"
