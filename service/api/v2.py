"""Open Inference Protocol v2 REST routes (KServe's v2 protocol, Triton's HTTP API).

``tritonclient.http.InferenceServerClient`` and KServe's clients talk to these: health, server and model metadata,
model readiness (FastAPI's routes, ``router``), and inference with JSON or binary tensor data (the inference entry's
routes). Every model is version ``1``. Errors on these paths have the protocol's body ``{"error": "message"}``
(``service.errors.error_body`` chooses it by path).

An infer request becomes the named model's task request (``service.tasks.LAYOUTS``: the input tensors fill its
inputs, ``parameters`` its options, the task's v1 model validates the lot) and its results the output tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError

from service.api import health
from service.api.bodies import invalid_value, is_json_media_type, parse_json
from service.api.deps import RegistryDep
from service.api.entry import Decoded, Incoming, InferenceRoute, Protocol, Reply
from service.api.error_docs import TASK_ERRORS, error_responses
from service.core import InferenceResult, ModelRegistry
from service.engine import Engine
from service.errors import BadRequest, ModelNotFound, NotReady, ServiceError, UnsupportedMediaType
from service.log_settings import log_settings, update_log_settings
from service.oip import EXTENSIONS, HEADER_LENGTH, OutputTensor, decode_inputs, encode_response, split_body
from service.oip.models import (
    SERVER_NAME,
    SERVER_VERSION,
    VERSION,
    chosen_outputs,
    classification_counts,
    classified_request,
    config_of,
    find_engine,
    is_ready,
    metadata_of,
    output_tensors,
    request_parameters,
    statistics_of,
    task_request,
)
from service.oip.shared_memory import Placement, SharedMemoryRegions, output_placements, place_outputs
from service.schemas.common import TaskRequest
from service.schemas.v2 import (
    V2Error,
    V2InferRequest,
    V2InferResponse,
    V2Live,
    V2LogSettings,
    V2ModelConfig,
    V2ModelMetadata,
    V2ModelReady,
    V2ModelStatisticsResponse,
    V2Ready,
    V2RequestOutput,
    V2ServerMetadata,
    V2TraceSettings,
    inline_json_schema,
)

router = APIRouter(prefix="/v2", tags=["v2"])


def v2_error_responses(*errors: type[ServiceError]) -> dict[int | str, dict[str, Any]]:
    return error_responses(*errors, body=V2Error)


INFER_ERRORS = v2_error_responses(*TASK_ERRORS)
BINARY_MEDIA_TYPE = "application/octet-stream"  # JSON, then binary tensor data (what tritonclient sends)


def check_media_type(content_type: str | None) -> None:
    """A v2 body is read when it comes without a media type (tritonclient and KServe's clients send none), as JSON,
    or as JSON then binary tensor data (octet-stream); any other (curl -d's form encoding) is a 415, as on v1."""
    if content_type is None or is_json_media_type(content_type):
        return
    if content_type.split(";")[0].strip().lower() == BINARY_MEDIA_TYPE:
        return
    raise UnsupportedMediaType(
        f"the body must be JSON, or JSON then binary tensor data: send 'Content-Type: application/json' "
        f"(not {content_type!r})"
    )


INFER_BODY = {
    "requestBody": {
        "required": True,
        "description": f"JSON, or JSON then binary tensor data (binary tensor data extension, {HEADER_LENGTH}).",
        "content": {"application/json": {"schema": inline_json_schema(V2InferRequest)}},
    }
}


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
async def server_metadata() -> V2ServerMetadata:
    """The server's name, version and protocol extensions (``get_server_metadata``)."""
    return V2ServerMetadata(name=SERVER_NAME, version=SERVER_VERSION, extensions=list(EXTENSIONS))


@router.get("/models/stats", response_model=V2ModelStatisticsResponse)
async def every_model_statistics(registry: RegistryDep) -> dict[str, Any]:
    """Every served model's inference statistics since it was warmed up (Triton's statistics extension:
    ``get_inference_statistics()``)."""
    return {"model_stats": statistics_of(registry)}


@router.get(
    "/models/{name}/stats", response_model=V2ModelStatisticsResponse, responses=v2_error_responses(ModelNotFound)
)
async def model_statistics(name: str, registry: RegistryDep) -> dict[str, Any]:
    """The model's requests, queue and model time, batches by size (``get_inference_statistics(name)``)."""
    return {"model_stats": statistics_of(registry, name)}


@router.get(
    "/models/{name}/versions/{version}/stats",
    response_model=V2ModelStatisticsResponse,
    responses=v2_error_responses(ModelNotFound),
)
async def model_version_statistics(name: str, version: str, registry: RegistryDep) -> dict[str, Any]:
    """The model's statistics; its only version is 1."""
    return {"model_stats": statistics_of(registry, name, version)}


@router.get("/models/{name}/config", response_model=V2ModelConfig, responses=v2_error_responses(ModelNotFound))
async def model_config(name: str, registry: RegistryDep) -> dict[str, Any]:
    """The model's configuration as Triton's model configuration extension gives it (``get_model_config``)."""
    return config_of(find_engine(registry, name))


@router.get(
    "/models/{name}/versions/{version}/config",
    response_model=V2ModelConfig,
    responses=v2_error_responses(ModelNotFound),
)
async def model_version_config(name: str, version: str, registry: RegistryDep) -> dict[str, Any]:
    """The model's configuration; its only version is 1."""
    return config_of(find_engine(registry, name, version))


@router.get("/logging", response_model=V2LogSettings)
async def logging_settings(request: Request) -> dict[str, Any]:
    """The service's log settings (Triton's logging extension: ``get_log_settings``)."""
    return log_settings(request.app.state.settings.log_format)


LOG_BODY = {
    "requestBody": {
        "required": True,
        "description": "The settings to change (tritonclient sends no media type; the body is read as JSON).",
        "content": {
            "application/json": {
                "schema": {"type": "object", "additionalProperties": {"type": ["boolean", "integer", "string"]}}
            }
        },
    }
}


@router.post("/logging", response_model=V2LogSettings, responses=v2_error_responses(BadRequest), openapi_extra=LOG_BODY)
async def update_logging(request: Request) -> dict[str, Any]:
    """Change the log threshold of a running server (``update_log_settings``); the settings after."""
    changes = parse_json(await request.body())
    if not isinstance(changes, dict):
        raise BadRequest('the body must be a JSON object of log settings, such as {"log_info": false}')
    return update_log_settings(changes, request.app.state.settings.log_format)


TRACE_BODY = {
    "requestBody": {
        "required": True,
        "description": "The settings to change, null to clear one (tritonclient sends no media type; read as JSON).",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "additionalProperties": {
                        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]
                    },
                }
            }
        },
    }
}


def trace_changes(body: bytes) -> dict[str, Any]:
    changes = parse_json(body)
    if not isinstance(changes, dict):
        raise BadRequest('the body must be a JSON object of trace settings, such as {"trace_rate": "10"}')
    return changes


@router.get("/trace/setting", response_model=V2TraceSettings)
async def trace_settings(request: Request) -> dict[str, Any]:
    """The global trace settings (Triton's trace extension: ``get_trace_settings``)."""
    return request.app.state.core.trace_settings.view()


@router.post(
    "/trace/setting", response_model=V2TraceSettings, responses=v2_error_responses(BadRequest), openapi_extra=TRACE_BODY
)
async def update_trace_settings(request: Request) -> dict[str, Any]:
    """Change which requests are traced, for every model without its own setting (``update_trace_settings``)."""
    return request.app.state.core.trace_settings.update(trace_changes(await request.body()))


@router.get("/models/{name}/trace/setting", response_model=V2TraceSettings, responses=v2_error_responses(ModelNotFound))
async def model_trace_settings(name: str, request: Request, registry: RegistryDep) -> dict[str, Any]:
    """The trace settings the model's infer requests follow: its own, else the global ones."""
    find_engine(registry, name)
    return request.app.state.core.trace_settings.view(name)


@router.post(
    "/models/{name}/trace/setting",
    response_model=V2TraceSettings,
    responses=v2_error_responses(BadRequest, ModelNotFound),
    openapi_extra=TRACE_BODY,
)
async def update_model_trace_settings(name: str, request: Request, registry: RegistryDep) -> dict[str, Any]:
    """Change the model's own trace settings (null: follow the global one again)."""
    find_engine(registry, name)
    return request.app.state.core.trace_settings.update(trace_changes(await request.body()), name)


def model_metadata_of(engine: Engine) -> V2ModelMetadata:
    return V2ModelMetadata.model_validate(metadata_of(engine))


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
    if not is_ready(registry, engine):
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
    chosen = chosen_outputs(outputs, [item.name for item in requested])
    binary: set[str] = set()
    for item in requested:
        wants_binary = (item.parameters or {}).get("binary_data", binary_default)
        if not isinstance(wants_binary, bool):
            raise BadRequest(f"output {item.name!r}: binary_data must be true or false")
        if wants_binary:
            binary.add(item.name)
    return chosen, binary


@dataclass(frozen=True, slots=True)
class InferCall:
    """What an infer answer needs besides the results: the engine, the request as asked (the one run asks for every
    class when outputs are classified), the outputs asked for and their classification counts, the request's id."""

    engine: Engine
    asked: TaskRequest
    outputs: list[V2RequestOutput] | None
    counts: dict[str, int]
    binary_default: bool
    id: str | None
    placements: dict[str, Placement]  # outputs to write to shared memory, by name
    regions: SharedMemoryRegions | None


def decode_infer(incoming: Incoming, registry: ModelRegistry) -> Decoded:
    """v2 body -> the named model's task request (the model is looked up first: an unknown one is a 404)."""
    engine = find_engine(registry, incoming.path_params["name"], incoming.path_params.get("version"))
    check_media_type(incoming.content_type)
    header, binary = split_body(incoming.body, incoming.header(HEADER_LENGTH))
    try:
        infer = V2InferRequest.model_validate(parse_json(header))
    except ValidationError as exc:
        raise invalid_value(exc, incoming.content_type) from None
    regions = incoming.shared_memory
    tensors = decode_inputs(infer, binary, regions.read if regions is not None else None)
    parameters = dict(infer.parameters or {})
    binary_default = parameters.pop("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise BadRequest("parameters.binary_data_output must be true or false")
    given = request_parameters(parameters)
    output_parameters = {output.name: output.parameters or {} for output in infer.outputs or ()}
    counts = classification_counts(output_parameters)
    placements = output_placements(output_parameters, regions) if regions is not None else {}
    asked = task_request(engine, tensors, given.options)
    call = InferCall(engine, asked, infer.outputs, counts, binary_default, infer.id, placements, regions)
    return Decoded(classified_request(engine, asked, counts), engine, call, given.timeout_s)


def infer_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    """The results as output tensors: the requested ones (default all), JSON data or binary after the JSON."""
    call: InferCall = decoded.context
    tensors = output_tensors(call.engine, call.asked, result.results, call.counts)
    outputs, binary_names = binary_outputs(tensors, call.outputs, call.binary_default)
    reply: dict[str, Any] = {"model_name": result.model, "model_version": VERSION}
    if call.id is not None:
        reply["id"] = call.id
    placed = place_outputs(outputs, call.placements, call.regions) if call.placements and call.regions else set()
    binary_names -= placed
    content, header_length = encode_response(reply, outputs, binary_names, placed)
    if not binary_names:
        return Reply(content)
    return Reply(content, "application/octet-stream", {HEADER_LENGTH: str(header_length)})


def infer_route(path: str, operation: str, description: str) -> InferenceRoute:
    return InferenceRoute(
        path,
        operation,
        description,
        "v2",
        V2InferResponse,
        infer_answer,
        decode=decode_infer,
        responses=INFER_ERRORS,
        openapi_extra=INFER_BODY,
    )


PROTOCOL = Protocol(
    "v2",
    (
        infer_route(
            "/v2/models/{name}/infer",
            "infer",
            "Run the model on input tensors (BYTES text; see the model's metadata), options in ``parameters``.",
        ),
        infer_route(
            "/v2/models/{name}/versions/{version}/infer",
            "infer_version",
            "Inference on the model's version; its only version is 1.",
        ),
    ),
    router,
)
