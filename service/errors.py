"""The service's closed error hierarchy: the one mapping from errors to HTTP status codes, and the one to gRPC
status codes (``grpc_code``, a ``grpc.StatusCode`` name: the gRPC transport reads it; nothing here imports grpc).

Every error response has the body ``{"error": {"type": ..., "message": ...}}``, except on the Open Inference
Protocol's paths (``/v2``...), whose spec says ``{"error": "message"}``: ``error_body`` picks by path.
Each class names its ``status_code``, its ``error_type`` and a ``description`` (the OpenAPI docs of the routes
that raise it); everything else (the app's handlers, the middlewares, ``HTTP_ERROR_TYPES``, the documented
``responses``) is derived from these classes. Engines raise them without knowing about HTTP.
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    """Base of every error the service reports to a client; raised as itself, an unexpected failure."""

    status_code: ClassVar[int] = 500
    grpc_code: ClassVar[str] = "INTERNAL"
    error_type: ClassVar[str] = "internal_error"
    description: ClassVar[str] = "Unexpected server error."

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    closes_connection: ClassVar[bool] = False  # the server closes the connection after the answer

    def headers(self) -> dict[str, str]:
        return {"Connection": "close"} if self.closes_connection else {}

    def body(self, path: str = "") -> dict[str, Any]:
        """The response body for a request to ``path`` (the protocol it spoke decides the shape)."""
        return error_body(self.error_type, self.message, path)


class Unauthorized(ServiceError):
    """No API key, or not one of the configured keys."""

    status_code = 401
    grpc_code = "UNAUTHENTICATED"
    error_type = "unauthorized"
    description = "A missing or wrong API key ('Authorization: Bearer KEY')."

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="bertserve"'}


class BadRequest(ServiceError):
    status_code = 400
    grpc_code = "INVALID_ARGUMENT"
    error_type = "bad_request"
    description = "Bad input, bad parameters, or an ambiguous or wrong-task model."


class NotFound(ServiceError):
    """No route at this path (raised by the router, not by the service)."""

    status_code = 404
    grpc_code = "UNIMPLEMENTED"
    error_type = "not_found"
    description = "No such path."


class ModelNotFound(ServiceError):
    status_code = 404
    grpc_code = "NOT_FOUND"
    error_type = "model_not_found"
    description = "No model by that name."


class ResourceNotFound(ServiceError):
    """A batch file or batch that does not exist, or belongs to another API key."""

    status_code = 404
    grpc_code = "NOT_FOUND"
    error_type = "resource_not_found"
    description = "No file or batch by that id (for this API key)."


class RegionNotFound(ServiceError):
    """A shared memory region that is not registered (Triton's shared memory extension)."""

    status_code = 404
    grpc_code = "NOT_FOUND"
    error_type = "region_not_found"
    description = "No shared memory region registered by that name."


class Conflict(ServiceError):
    status_code = 409
    grpc_code = "FAILED_PRECONDITION"
    error_type = "conflict"
    description = (
        "The file, batch or region is in a state that does not allow this (a finished batch cannot be cancelled, a "
        "registered shared memory region's name cannot be registered again, a model load or unload that some "
        "serving process could not do)."
    )


class MethodNotAllowed(ServiceError):
    status_code = 405
    grpc_code = "UNIMPLEMENTED"
    error_type = "method_not_allowed"
    description = "The path does not take this method."


class BodyTimeout(ServiceError):
    """The body did not arrive in full within ``body_timeout_s``; the connection is closed with the answer."""

    status_code = 408
    grpc_code = "DEADLINE_EXCEEDED"
    error_type = "body_timeout"
    closes_connection = True
    description = "The request body did not arrive in full within body_timeout_s; the connection is closed."


class PayloadTooLarge(ServiceError):
    status_code = 413
    grpc_code = "INVALID_ARGUMENT"
    error_type = "payload_too_large"
    description = (
        "Body larger than max_body_bytes, more inputs than max_inputs_per_request (max_embedding_inputs for "
        "embeddings), or more tokens of text than max_request_tokens (max_embedding_tokens)."
    )


class HeadersTooLarge(ServiceError):
    """The request line and headers are longer than ``max_header_bytes``; answered by the HTTP protocol itself."""

    status_code = 431
    grpc_code = "INVALID_ARGUMENT"
    error_type = "headers_too_large"
    closes_connection = True
    description = "The request line and headers are larger than max_header_bytes; the connection is closed."


class UnsupportedMediaType(ServiceError):
    status_code = 415
    grpc_code = "INVALID_ARGUMENT"
    error_type = "unsupported_media_type"
    description = "The body is not in a media type the route takes."


class InvalidRequest(ServiceError):
    """The request does not match its schema (FastAPI's validation)."""

    status_code = 422
    grpc_code = "INVALID_ARGUMENT"
    error_type = "validation_error"
    description = "The body does not match the request schema."


class Overloaded(ServiceError):
    """Too many requests in flight or the model's queue is full; the client should retry after ``retry_after_s`` s."""

    status_code = 429
    grpc_code = "RESOURCE_EXHAUSTED"
    error_type = "overloaded"
    description = (
        "Too many requests in flight (max_concurrent_requests), too many bodies being read (max_body_readers, "
        "max_body_buffer_bytes) or the model's queue is full; retry after the Retry-After header's seconds."
    )

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, int(retry_after_s))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class ClientClosedRequest(ServiceError):
    """The client went away before its answer was ready (nginx's 499); nobody reads this response."""

    status_code = 499
    grpc_code = "CANCELLED"
    error_type = "client_closed_request"
    description = "The client went away before the answer was ready."


class InferenceError(ServiceError):
    status_code = 500
    grpc_code = "INTERNAL"
    error_type = "inference_error"
    description = "Inference failed."


class NotReady(ServiceError):
    status_code = 503
    grpc_code = "UNAVAILABLE"
    error_type = "not_ready"
    description = "Not ready: a model is still loading or warming up, or the service is shutting down."


class RequestTimeout(ServiceError):
    status_code = 504
    grpc_code = "DEADLINE_EXCEEDED"
    error_type = "timeout"
    description = "The request did not finish within the timeout."


V2_PATH_PREFIX = "/v2"  # the Open Inference Protocol (KServe / Triton v2) routes
NOT_V2_PATHS = frozenset({"/v2/rerank", "/v2/embed"})  # Cohere's v2 API, whose errors are this service's own shape


def speaks_v2(path: str) -> bool:
    return (path == V2_PATH_PREFIX or path.startswith(V2_PATH_PREFIX + "/")) and path not in NOT_V2_PATHS


def error_body(error_type: str, message: str, path: str = "") -> dict[str, Any]:
    """``{"error": {"type", "message"}}``; on a v2 path the protocol's ``{"error": "message"}``."""
    if speaks_v2(path):
        return {"error": message}
    return {"error": {"type": error_type, "message": message}}


# The class that stands for each status code when the status did not come from a ServiceError
# (FastAPI validation, routing, Starlette's HTTPException): its error_type goes in the body.
GENERIC_ERRORS: tuple[type[ServiceError], ...] = (
    BadRequest,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    UnsupportedMediaType,
    InvalidRequest,
    Overloaded,
    ServiceError,
    NotReady,
    RequestTimeout,
)
HTTP_ERROR_TYPES: dict[int, str] = {error.status_code: error.error_type for error in GENERIC_ERRORS}


def _every_error_type() -> tuple[str, ...]:
    found, todo = {ServiceError.error_type}, [ServiceError]
    while todo:
        for subclass in todo.pop().__subclasses__():
            found.add(subclass.error_type)
            todo.append(subclass)
    return tuple(sorted(found | set(HTTP_ERROR_TYPES.values()) | {"client_error", "server_error"}))


# Every ``error.type`` an answer can carry (the OpenAPI document lists them as an enum).
ERROR_TYPES: tuple[str, ...] = _every_error_type()
assert len(HTTP_ERROR_TYPES) == len(GENERIC_ERRORS), "one generic error per status code"


def http_error_type(status_code: int) -> str:
    """The ``error_type`` for a status code that did not come from a ServiceError."""
    return HTTP_ERROR_TYPES.get(status_code, "client_error" if status_code < 500 else "server_error")


def documented_statuses(*errors: type[ServiceError]) -> dict[int, str]:
    """Status code -> description, for the OpenAPI ``responses`` of a route that may answer ``errors``."""
    statuses: dict[int, str] = {}
    for error in errors:
        known = statuses.get(error.status_code)
        statuses[error.status_code] = error.description if known is None else f"{known} Or: {error.description}"
    return dict(sorted(statuses.items()))
