"""Open Inference Protocol v2 REST routes (KServe's v2 protocol, Triton's HTTP API) over the shared request path.

``tritonclient.http.InferenceServerClient`` and KServe's clients talk to these: health, server and model metadata,
model readiness, and inference with JSON or binary tensor data. Every model is version ``1``. Errors on these paths
have the protocol's body ``{"error": "message"}`` (``service.errors.error_body`` chooses it by path).
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from service.api import health
from service.api.deps import RegistryDep, SettingsDep
from service.api.http import client_gone
from service.engine import Engine
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
    documented_statuses,
)
from service.inference import InferenceRequest, run_inference
from service.oip import EXTENSIONS, HEADER_LENGTH, LAYOUTS, OutputTensor, decode_inputs, encode_response, split_body
from service.registry import ModelRegistry
from service.schemas.v2 import (
    V2Error,
    V2InferRequest,
    V2InferResponse,
    V2Live,
    V2ModelMetadata,
    V2ModelReady,
    V2Ready,
    V2RequestOutput,
    V2ServerMetadata,
    inline_json_schema,
)
from service.settings import Settings

router = APIRouter(prefix="/v2", tags=["v2"])

VERSION = "1"
PLATFORM = "onnxruntime_onnx"


def v2_error_responses(*errors: type[ServiceError]) -> dict[int | str, dict[str, Any]]:
    return {
        status: {"model": V2Error, "description": description}
        for status, description in documented_statuses(*errors).items()
    }


INFER_ERRORS = v2_error_responses(
    BadRequest, ModelNotFound, PayloadTooLarge, InvalidRequest, Overloaded, InferenceError, NotReady, RequestTimeout
)
INFER_BODY = {
    "requestBody": {
        "required": True,
        "description": f"JSON, or JSON then binary tensor data (binary tensor data extension, {HEADER_LENGTH}).",
        "content": {"application/json": {"schema": inline_json_schema(V2InferRequest)}},
    }
}


def find_engine(registry: ModelRegistry, name: str, version: str | None = None) -> Engine:
    engine = registry.engines.get(name)
    if engine is None:
        known = ", ".join(sorted(registry.engines)) or "none"
        raise ModelNotFound(f"no model named {name!r} (loaded: {known})")
    if version is not None and version != VERSION:
        raise ModelNotFound(f"model {name!r} has no version {version!r} (versions: {VERSION})")
    return engine


def parsed(model: type[BaseModel], content: bytes) -> Any:
    try:
        return model.model_validate_json(content)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


@router.get("/health/live", response_model=V2Live)
async def server_live() -> V2Live:
    """The process is up (tritonclient's ``is_server_live``)."""
    return V2Live(live=True)


@router.get("/health/ready", response_model=V2Ready, responses=v2_error_responses(NotReady))
async def server_ready(registry: RegistryDep) -> V2Ready:
    """200 once every model is loaded and warmed up, as ``/health/ready``; 503 before (``is_server_ready``)."""
    await health.ready(registry)
    return V2Ready(ready=True)


@router.get("", response_model=V2ServerMetadata)
async def server_metadata(request: Request) -> V2ServerMetadata:
    """The server's name, version and protocol extensions (``get_server_metadata``)."""
    return V2ServerMetadata(name=request.app.title, version=request.app.version, extensions=list(EXTENSIONS))


def model_metadata_of(engine: Engine) -> V2ModelMetadata:
    layout = LAYOUTS[engine.task]
    return V2ModelMetadata.model_validate(
        {
            "name": engine.name,
            "versions": [VERSION],
            "platform": PLATFORM,
            "inputs": [spec.metadata() for spec in layout.inputs],
            "outputs": [spec.metadata() for spec in layout.outputs],
        }
    )


@router.get("/models/{name}", response_model=V2ModelMetadata, responses=v2_error_responses(ModelNotFound))
async def model_metadata(name: str, registry: RegistryDep) -> V2ModelMetadata:
    """The model's input and output tensors: names, datatypes, shapes (-1: varies) (``get_model_metadata``)."""
    return model_metadata_of(find_engine(registry, name))


@router.get(
    "/models/{name}/versions/{version}", response_model=V2ModelMetadata, responses=v2_error_responses(ModelNotFound)
)
async def model_version_metadata(name: str, version: str, registry: RegistryDep) -> V2ModelMetadata:
    """The model's metadata; its only version is 1."""
    return model_metadata_of(find_engine(registry, name, version))


def model_ready_of(registry: ModelRegistry, engine: Engine) -> V2ModelReady:
    if registry.shutting_down or not engine.ready:
        raise NotReady(f"model {engine.name!r} is not ready")
    return V2ModelReady(name=engine.name, ready=True)


@router.get("/models/{name}/ready", response_model=V2ModelReady, responses=v2_error_responses(ModelNotFound, NotReady))
async def model_ready(name: str, registry: RegistryDep) -> V2ModelReady:
    """200 when the model is loaded and warmed up; 503 before (``is_model_ready``)."""
    return model_ready_of(registry, find_engine(registry, name))


@router.get(
    "/models/{name}/versions/{version}/ready",
    response_model=V2ModelReady,
    responses=v2_error_responses(ModelNotFound, NotReady),
)
async def model_version_ready(name: str, version: str, registry: RegistryDep) -> V2ModelReady:
    """The model's readiness; its only version is 1."""
    return model_ready_of(registry, find_engine(registry, name, version))


def binary_outputs(
    outputs: list[OutputTensor], requested: list[V2RequestOutput] | None, binary_default: bool
) -> tuple[list[OutputTensor], set[str]]:
    """The requested outputs (default all) in request order, and which of them go back as binary data."""
    if requested is None:
        return outputs, {output.name for output in outputs} if binary_default else set()
    by_name = {output.name: output for output in outputs}
    chosen: list[OutputTensor] = []
    binary: set[str] = set()
    for item in requested:
        if item.name not in by_name:
            raise BadRequest(f"unknown output {item.name!r}; this model gives: {', '.join(by_name)}")
        chosen.append(by_name[item.name])
        wants_binary = (item.parameters or {}).get("binary_data", binary_default)
        if not isinstance(wants_binary, bool):
            raise BadRequest(f"output {item.name!r}: binary_data must be true or false")
        if wants_binary:
            binary.add(item.name)
    return chosen, binary


async def infer_response(
    request: Request, registry: ModelRegistry, settings: Settings, name: str, version: str | None = None
) -> Response:
    """v2 body -> the task's v1 request -> ``run_inference`` (same engines and batcher) -> output tensors."""
    engine = find_engine(registry, name, version)
    layout = LAYOUTS[engine.task]
    header, binary = split_body(await request.body(), request.headers.get(HEADER_LENGTH))
    infer: V2InferRequest = parsed(V2InferRequest, header)
    tensors = decode_inputs(infer, binary)
    parameters = dict(infer.parameters or {})
    binary_default = parameters.pop("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise BadRequest("parameters.binary_data_output must be true or false")
    try:
        task_request = layout.task_request(tensors, parameters, engine.name)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None
    inputs, params = task_request.to_task()
    inference = InferenceRequest(task=engine.task, inputs=inputs, params=params, model=engine.name)
    result = await run_inference(inference, registry, settings, functools.partial(client_gone, request))
    outputs, binary_names = binary_outputs(layout.tensors(task_request, result.results), infer.outputs, binary_default)
    reply: dict[str, Any] = {"model_name": result.model, "model_version": VERSION}
    if infer.id is not None:
        reply["id"] = infer.id
    content, header_length = encode_response(reply, outputs, binary_names)
    if not binary_names:
        return Response(content=content, media_type="application/json")
    headers = {HEADER_LENGTH: str(header_length)}
    return Response(content=content, media_type="application/octet-stream", headers=headers)


@router.post("/models/{name}/infer", response_model=V2InferResponse, responses=INFER_ERRORS, openapi_extra=INFER_BODY)
async def infer(name: str, request: Request, registry: RegistryDep, settings: SettingsDep) -> Response:
    """Run the model on input tensors (BYTES text; see the model's metadata), options in ``parameters``."""
    return await infer_response(request, registry, settings, name)


@router.post(
    "/models/{name}/versions/{version}/infer",
    response_model=V2InferResponse,
    responses=INFER_ERRORS,
    openapi_extra=INFER_BODY,
)
async def infer_version(
    name: str, version: str, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Inference on the model's version; its only version is 1."""
    return await infer_response(request, registry, settings, name, version)
