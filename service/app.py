"""``create_app(settings)`` / ``create_app(core=core)``: the HTTP transport over a ``ServiceCore``: routes, error
mapping, middleware, and a lifespan that starts the core (loading its models first unless ``python -m service``
already did, to fail fast on a bad bundle; ``/health/ready`` is 503 until every model is warm) and the gRPC
transport beside it when ``grpc_port`` is set, and on shutdown stops them (readiness off, queued work drained,
workers stopped).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from service.api.batch import FILES_PATH, Upload, UploadEntry, file_upload, open_batch_jobs
from service.api.bodies import validation_error
from service.api.cohere_jobs import DATASETS_PATH, dataset_upload
from service.api.entry import InferenceEntry
from service.api.openapi_doc import finish_document
from service.api.operation_ids import operation_id
from service.api.protocols import INFERENCE_ROUTES, ROUTERS
from service.core import ServiceCore
from service.engine import Engine
from service.errors import ServiceError, error_body, http_error_type
from service.middleware import (
    ApiKeyMiddleware,
    BodyReadMiddleware,
    ConcurrencyLimitMiddleware,
    MetricsMiddleware,
    open_path_prefixes,
)
from service.oip import HEADER_LENGTH
from service.settings import Settings

if TYPE_CHECKING:
    from service.grpc.server import GrpcTransport

logger = logging.getLogger(__name__)
# The service makes its own spans and metrics (service.tracing, service.metrics). FastAPI's native OpenTelemetry (from
# 0.16x) would add a second span per request wherever a global tracer provider is set, and asks for the global
# providers on every request to find out; it is turned off where this FastAPI has it.
OWN_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)

API_DESCRIPTION = """Pipeline-exact answers for fine-tuned BERT models (ONNX Runtime, token-budget batching).

Every task route takes one input or a list of inputs and answers `{"model", "results"}` where
`results` has one entry per input: **a single (non-list) input still gets a list of one**.
The compatible routes answer in their protocol's shape: `/v1/embeddings` as OpenAI's embeddings API,
`/embed` as text-embeddings-inference's.
Every error has the body `{"error": {"type", "message"}}`; the Open Inference Protocol v2 routes (`/v2/...`,
KServe / Triton clients) answer as that protocol says, errors as `{"error": "message"}`.
"""


def _error_response(error: ServiceError, request: Request) -> JSONResponse:
    body = error.body(request.scope["path"])
    return JSONResponse(body, status_code=error.status_code, headers=error.headers())


def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    return _error_response(exc, request)


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return _error_response(validation_error(exc.errors(), request.headers.get("content-type")), request)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Routing and framework errors: the status is Starlette's, the body's type the one errors.py gives it."""
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    body = error_body(http_error_type(exc.status_code), message, request.scope["path"])
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # every method the path takes, not only the first route's (GET / and POST /)
        path = request.scope["path"]
        matched = [(taken, fixed) for pattern, taken, fixed in request.app.state.methods if pattern.match(path)]
        if any(fixed for _, fixed in matched):  # a path of its own (/v1/datasets/usage), not /v1/datasets/{id}'s
            matched = [(taken, fixed) for taken, fixed in matched if fixed]
        methods = {method for taken, _ in matched for method in taken}
        headers["Allow"] = ", ".join(sorted(methods)) or headers.get("Allow", "")
    return JSONResponse(body, status_code=exc.status_code, headers=headers)


def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error_response(ServiceError(f"internal error: {type(exc).__name__}"), request)


async def start_when_ready(core: ServiceCore, grpc: GrpcTransport) -> None:
    while not core.ready:
        await asyncio.sleep(0.05)
    await grpc.start()


def create_app(
    settings: Settings | None = None,
    engines: Mapping[str, Engine] | None = None,
    broken: Mapping[str, str] | None = None,
    core: ServiceCore | None = None,
) -> FastAPI:
    """The HTTP transport over ``core`` (else a core of ``settings``, ``engines`` and ``broken``, see
    ``ServiceCore``): the lifespan starts the core (loading its models first unless they are loaded) and stops it."""
    core = core or ServiceCore(settings or Settings(), engines, broken)
    settings = core.settings
    batch_jobs = open_batch_jobs(core)  # the Batch API's and Cohere's jobs, when settings.data_dir is set
    batch_runner, cohere_jobs = batch_jobs if batch_jobs is not None else (None, None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await core.start()
        app.state.registry = core.registry
        if batch_runner is not None:
            batch_runner.start()
        grpc, opening = None, None
        if settings.grpc_port is not None:  # the gRPC transport, over the same core, on this event loop
            from service.grpc.server import GrpcTransport

            grpc = GrpcTransport(core)
            if settings.processes > 1:  # one of several (service.processes): it opens the port once its models are warm
                opening = asyncio.create_task(start_when_ready(core, grpc))
            else:
                await grpc.start()
            app.state.grpc = grpc
        try:
            yield
        finally:
            if batch_runner is not None:
                await batch_runner.stop()  # an uncommitted chunk runs again on the next start
            if opening is not None:
                opening.cancel()
            if grpc is not None:
                await grpc.stop(grace_s=settings.timeout_s)  # calls in flight finish within their deadline
            await core.stop(drain=True)

    app = FastAPI(
        title="bertserve",
        version="0.1.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        redirect_slashes=False,  # a trailing slash is a 404 in the error shape, not an empty 307
        generate_unique_id_function=operation_id,
        docs_url=None,  # /docs and /redoc come from service.api.docs, with their assets served locally
        redoc_url=None,
        **OWN_TELEMETRY,
    )
    app.state.core = core
    app.state.settings = settings
    app.state.metrics = core.metrics
    app.state.executor = core.executor
    app.state.registry = core.registry
    app.state.batch_runner = batch_runner
    app.state.cohere_jobs = cohere_jobs
    for router in ROUTERS:
        app.include_router(router)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
    # FastAPI nests an included router's routes, so the app's own list does not show their paths: ask the routers
    routes = [*app.routes, *(route for router in ROUTERS for route in router.routes)]
    known_paths = frozenset(path for route in routes if (path := getattr(route, "path", "")))
    posted = {getattr(route, "path", ""): route for route in routes if "POST" in getattr(route, "methods", ())}
    app.state.methods = [  # (the path's pattern, its methods, whether the path has no parameters)
        (route.path_regex, frozenset(route.methods or ()), not route.param_convertors)
        for route in routes
        if isinstance(route, Route)
    ]
    app.add_middleware(InferenceEntry, routes=[(route, posted[route.path]) for route in INFERENCE_ROUTES])
    app.add_middleware(
        ConcurrencyLimitMiddleware, permits=core.permits, enforce_retry_after=settings.enforce_retry_after
    )
    app.add_middleware(
        BodyReadMiddleware,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        max_body_readers=settings.max_body_readers,
        max_body_buffer_bytes=settings.max_body_buffer_bytes,
    )
    if batch_runner is not None and cohere_jobs is not None:  # else the declared routes answer (404, saying so)
        uploads = {
            FILES_PATH: Upload(posted[FILES_PATH], file_upload(batch_runner, settings), "'file' and 'purpose'"),
            DATASETS_PATH: Upload(posted[DATASETS_PATH], dataset_upload(cohere_jobs, settings), "'data'"),
        }
        app.add_middleware(UploadEntry, settings=settings, uploads=uploads)
    open_paths = None
    if settings.api_keys:
        app.add_middleware(ApiKeyMiddleware, keys=settings.api_keys, protect_metrics=settings.protect_metrics)
        open_paths = open_path_prefixes(settings.protect_metrics)
    finish_document(app, open_paths)
    app.add_middleware(
        MetricsMiddleware,
        metrics=core.metrics,
        known_paths=known_paths,
        access_log=settings.access_log,
        tracing=core.tracing,
    )
    if settings.cors_allow_origins:  # outermost: a preflight is answered before keys and limits apply
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allow_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", HEADER_LENGTH],
            expose_headers=["Retry-After", HEADER_LENGTH],
            max_age=600,
        )
    return app
