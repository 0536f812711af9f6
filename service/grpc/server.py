"""The Open Inference Protocol v2 over gRPC (``inference.GRPCInferenceService``), served from the core as HTTP is:
the same models, tensor layouts, limits, in-flight permits, admission, API keys and errors, through
``service.core.run_inference``; never through the HTTP app.

- A request's deadline is the client's gRPC deadline or its ``timeout`` parameter when shorter than ``timeout_s``;
  a cancelled call drops its queued rows as a closed HTTP connection does.
- Errors are the service's own (``service.errors``), each class's ``grpc_code``: 429's ``RESOURCE_EXHAUSTED`` carries
  the delay in trailing metadata, ``retry-after`` (seconds) and ``grpc-retry-pushback-ms`` (what gRPC's own retry
  policy reads). A message over ``max_body_bytes`` is ``RESOURCE_EXHAUSTED`` from gRPC itself.
- API keys: ``authorization: Bearer KEY`` metadata, on every call but ServerLive and ServerReady (the health probes).
- Inputs come as ``raw_input_contents`` (tritonclient's default) or ``contents.bytes_contents``; outputs go back as
  ``raw_output_contents``, as Triton sends them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import json_format

from service.core import InferenceRequest, ServiceCore, key_authorised, run_inference
from service.errors import BadRequest, ModelNotFound, Overloaded, RequestTimeout, ServiceError, Unauthorized
from service.grpc.protocol import MESSAGES, SERVER_ERRORS, SERVICE, STREAMS, method_handlers, trace_carrier
from service.grpc.standard import ReadinessHealth, add_standard_services
from service.grpc.stream import stream_handler
from service.log_settings import log_settings, update_log_settings
from service.metrics import log_access
from service.oip.codec import EXTENSIONS, bytes_elements, shaped
from service.oip.models import (
    CLASSIFICATION,
    SERVER_NAME,
    SERVER_VERSION,
    VERSION,
    check_load_parameters,
    check_unload_parameters,
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
from service.oip.shared_memory import (
    NO_CUDA,
    PARAMETERS,
    SharedMemoryRegions,
    cuda_status,
    output_placements,
    place_outputs,
    placement_of,
)
from service.repository import READY
from service.tracing import ACCESS_RECORD, RequestRecord

logger = logging.getLogger(__name__)
OPEN_METHODS = frozenset({"ServerLive", "ServerReady"})  # health probes: no API key, as /v2/health
OUTPUT_PARAMETERS = frozenset({"binary_data", CLASSIFICATION, *PARAMETERS})
Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]  # (request, context) -> reply


def parameter_value(parameter: Any, name: str) -> Any:
    """An InferParameter or ModelRepositoryParameter as the Python value its ``parameter_choice`` holds."""
    choice = parameter.WhichOneof("parameter_choice")
    if choice is None:
        raise BadRequest(f"parameter {name!r} has no value")
    return getattr(parameter, choice)


def input_tensors(request: Any, regions: SharedMemoryRegions) -> dict[str, list[str]]:
    """Each input's elements by name, row-major: BYTES from ``raw_input_contents`` (one for each input not in shared
    memory, in order, as Triton reads them), ``contents.bytes_contents`` or a shared memory region."""
    raw = request.raw_input_contents
    tensors: dict[str, list[str]] = {}
    placements = [placement_of(tensor_parameters(tensor), tensor.name) for tensor in request.inputs]
    if raw and len(raw) != placements.count(None):
        raise BadRequest(f"{len(raw)} raw_input_contents for {placements.count(None)} inputs not in shared memory: "
                         "give one for each")  # fmt: skip
    index = 0
    for tensor, where in zip(request.inputs, placements, strict=True):
        if tensor.name in tensors:
            raise BadRequest(f"input {tensor.name!r} is given twice")
        if tensor.datatype != "BYTES":
            raise BadRequest(f"input {tensor.name!r} is {tensor.datatype}; every input is text, datatype BYTES")
        if where is not None:
            if tensor.HasField("contents"):
                raise BadRequest(f"input {tensor.name!r} has contents beside shared_memory_region: give one of them")
            values = bytes_elements(regions.read(where, tensor.name), tensor.name)
        elif raw:
            if tensor.HasField("contents"):
                raise BadRequest(f"input {tensor.name!r} has contents beside raw_input_contents: give one of them")
            values = bytes_elements(raw[index], tensor.name)
            index += 1
        elif tensor.HasField("contents"):
            values = [
                _text(element, tensor.name, position) for position, element in enumerate(tensor.contents.bytes_contents)
            ]
        else:
            raise BadRequest(f"input {tensor.name!r} has no data: send contents.bytes_contents or raw_input_contents")
        tensors[tensor.name] = shaped(values, tensor.shape, tensor.name)
    return tensors


def tensor_parameters(tensor: Any) -> dict[str, Any]:
    return {name: parameter_value(value, name) for name, value in tensor.parameters.items()}


def _text(element: bytes, name: str, position: int) -> str:
    try:
        return element.decode()
    except UnicodeDecodeError:
        raise BadRequest(f"input {name!r}: element {position} is not UTF-8 text") from None


def requested_outputs(request: Any) -> tuple[list[str] | None, dict[str, dict[str, Any]]]:
    """The outputs asked for by name (None: all) and their parameters by name."""
    parameters = {}
    for output in request.outputs:
        unknown = sorted(set(output.parameters) - OUTPUT_PARAMETERS)
        if unknown:
            raise BadRequest(f"output {output.name!r}: unknown parameter {unknown[0]!r}")
        parameters[output.name] = tensor_parameters(output)
    return [output.name for output in request.outputs] or None, parameters


def trailing_metadata(error: ServiceError) -> tuple[tuple[str, str], ...]:
    if isinstance(error, Overloaded):
        return (("retry-after", str(error.retry_after_s)), ("grpc-retry-pushback-ms", str(1000 * error.retry_after_s)))
    return ()


class InferenceServicer:
    """Each call of the protocol over ``core``, as the method of its name; ``guard`` wraps each one (keys, errors,
    metrics, access line)."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return MESSAGES["ServerLiveResponse"](live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return MESSAGES["ServerReadyResponse"](ready=self.core.ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return MESSAGES["ServerMetadataResponse"](name=SERVER_NAME, version=SERVER_VERSION, extensions=list(EXTENSIONS))

    async def ModelReady(self, request: Any, context: Any) -> Any:
        """Ready false for a model not served (tritonclient.http's ``is_model_ready`` is False on REST's 404 too)."""
        registry = self.core.registry
        try:
            engine = find_engine(registry, request.name, request.version or None)
        except ModelNotFound:
            return MESSAGES["ModelReadyResponse"](ready=False)
        return MESSAGES["ModelReadyResponse"](ready=is_ready(registry, engine))

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        engine = find_engine(self.core.registry, request.name, request.version or None)
        return MESSAGES["ModelMetadataResponse"](**metadata_of(engine))

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        registry = self.core.registry
        engine = find_engine(registry, request.model_name, request.model_version or None)
        regions = self.core.shared_memory
        tensors = input_tensors(request, regions)
        given = request_parameters({name: parameter_value(value, name) for name, value in request.parameters.items()})
        task = task_request(engine, tensors, given.options)
        wanted, output_parameters = requested_outputs(request)
        counts = classification_counts(output_parameters)
        placements = output_placements(output_parameters, regions)
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            raise RequestTimeout("the call's deadline passed before it started")
        if given.timeout_s is not None:
            remaining = given.timeout_s if remaining is None else min(remaining, given.timeout_s)
        self.core.permits.take()
        try:
            inference = InferenceRequest.of(classified_request(engine, task, counts), timeout_s=remaining)
            result = await run_inference(inference, registry, self.core.settings, None, engine)
        finally:
            self.core.permits.give()
        outputs = chosen_outputs(output_tensors(engine, task, result.results, counts), wanted)
        placed = place_outputs(outputs, placements, regions) if placements else set()
        reply = MESSAGES["ModelInferResponse"](model_name=result.model, model_version=VERSION, id=request.id)
        for output in outputs:
            reply.outputs.add(name=output.name, datatype=output.datatype, shape=list(output.shape))
            # one raw entry for every output, empty for one in shared memory, as Triton answers: indices stay aligned
            reply.raw_output_contents.append(b"" if output.name in placed else output.binary_data())
        return reply

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        found = statistics_of(self.core.registry, request.name, request.version or None)
        return json_format.ParseDict({"model_stats": found}, MESSAGES["ModelStatisticsResponse"]())

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        engine = find_engine(self.core.registry, request.name, request.version or None)
        return json_format.ParseDict({"config": config_of(engine)}, MESSAGES["ModelConfigResponse"]())

    async def LogSettings(self, request: Any, context: Any) -> Any:
        changes = {name: parameter_value(value, name) for name, value in request.settings.items()}
        log_format = self.core.settings.log_format
        now = update_log_settings(changes, log_format) if changes else log_settings(log_format)
        reply = MESSAGES["LogSettingsResponse"]()
        for name, value in now.items():
            kind = (
                "bool_param"
                if isinstance(value, bool)
                else "uint32_param"
                if isinstance(value, int)
                else "string_param"
            )
            setattr(reply.settings[name], kind, value)
        return reply

    async def TraceSetting(self, request: Any, context: Any) -> Any:
        model = request.model_name or None
        if model is not None:
            find_engine(self.core.registry, model)
        settings = self.core.trace_settings
        changes = {name: list(setting.value) or None for name, setting in request.settings.items()}
        now = settings.update(changes, model) if changes else settings.view(model)
        reply = MESSAGES["TraceSettingResponse"]()
        for name, value in now.items():
            reply.settings[name].value.extend(value if isinstance(value, list) else [value])
        return reply

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        reply = MESSAGES["SystemSharedMemoryStatusResponse"]()
        for region in self.core.shared_memory.status(request.name):
            reply.regions[region["name"]].CopyFrom(reply.RegionStatus(**region))
        return reply

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        self.core.shared_memory.register(request.name, request.key, request.offset, request.byte_size)
        return MESSAGES["SystemSharedMemoryRegisterResponse"]()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        self.core.shared_memory.unregister(request.name)
        return MESSAGES["SystemSharedMemoryUnregisterResponse"]()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        cuda_status(request.name)
        return MESSAGES["CudaSharedMemoryStatusResponse"]()

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        raise BadRequest(NO_CUDA)

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return MESSAGES["CudaSharedMemoryUnregisterResponse"]()  # none is registered: nothing to do, as Triton

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        reply = MESSAGES["RepositoryIndexResponse"]()
        for model in self.core.repository.index(ready_only=request.ready):
            version = VERSION if model.state == READY else ""
            reply.models.add(name=model.name, version=version, state=model.state, reason=model.reason)
        return reply

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        check_load_parameters(dict(request.parameters))
        await self.core.repository.load(request.model_name)
        return MESSAGES["RepositoryModelLoadResponse"]()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        parameters = {name: parameter_value(value, name) for name, value in request.parameters.items()}
        check_unload_parameters(parameters)
        await self.core.repository.unload(request.model_name)
        return MESSAGES["RepositoryModelUnloadResponse"]()


def guard(core: ServiceCore, name: str, method: Handler) -> Handler:
    """``method`` behind the API key check, its ServiceError as the status its class names, counted in the request
    metrics (route: the call's path; status: the code's name) and written in the access line."""
    path = f"/{SERVICE}/{name}"
    keys = [key.encode() for key in core.settings.api_keys] if name not in OPEN_METHODS else []
    access_log = core.settings.access_log
    tracing = core.tracing
    latency = core.metrics.request_seconds.labels(path)
    counters: dict[grpc.StatusCode, Any] = {}  # a metric's child per status, looked up once (labels() takes a lock)

    async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = time.perf_counter()
        span = None
        if tracing is None:
            record = RequestRecord() if access_log else None
        else:
            carrier = trace_carrier(context)
            model = request.model_name or None if name == "ModelInfer" else None  # what trace settings follow
            span = tracing.begin(f"{SERVICE}/{name}", carrier, {"rpc.system": "grpc", "rpc.service": SERVICE,
                                                                "rpc.method": name}, model)  # fmt: skip
            record = tracing.record_for(span, access_log)
        opened = ACCESS_RECORD.set(record)
        code = grpc.StatusCode.OK
        try:
            if keys:
                authorization = dict(context.invocation_metadata() or ()).get("authorization", "")
                if not key_authorised(str(authorization).encode(), keys):
                    raise Unauthorized("missing or wrong API key: send 'authorization: Bearer KEY' metadata")
            return await method(request, context)
        except asyncio.CancelledError:
            code = grpc.StatusCode.CANCELLED
            raise
        except ServiceError as error:
            code = grpc.StatusCode[error.grpc_code]
            await context.abort(code, error.message, trailing_metadata(error))
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            code = grpc.StatusCode.INTERNAL
            logger.error("unhandled error on %s", path, exc_info=exc)
            await context.abort(code, f"internal error: {type(exc).__name__}")
        finally:
            ACCESS_RECORD.reset(opened)
            elapsed = time.perf_counter() - started
            counter = counters.get(code)
            if counter is None:
                counter = counters[code] = core.metrics.requests.labels(path, code.name)
            counter.inc()
            latency.observe(elapsed)
            if span is not None and tracing is not None:
                tracing.end(span, record, {"rpc.grpc.status_code": code.value[0]}, error=code in SERVER_ERRORS)
            if record is not None and access_log:
                log_access("GRPC", path, code.name, elapsed, record)

    return call


class GrpcTransport:
    """The gRPC server over ``core`` on ``settings.host``:``settings.grpc_port``, on the running event loop."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self.server: grpc.aio.Server | None = None
        self.port: int | None = None
        self._health: ReadinessHealth | None = None
        self._following: asyncio.Task[None] | None = None

    async def start(self) -> None:
        settings = self.core.settings
        options = [
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", int(settings.processes > 1)),  # one port for the processes; else a taken one fails
        ]
        server = grpc.aio.server(options=options)
        served = InferenceServicer(self.core)

        def behaviour(name: str) -> Any:
            if name in STREAMS:  # ModelStreamInfer: each request as ModelInfer answers it (service.grpc.stream)
                return stream_handler(self.core, name, served.ModelInfer)
            return guard(self.core, name, getattr(served, name))

        server.add_generic_rpc_handlers((method_handlers(behaviour),))
        self._health = add_standard_services(server, lambda: self.core.ready)
        port = settings.grpc_port if settings.grpc_port is not None else 0
        self.port = server.add_insecure_port(f"{settings.host}:{port}")
        await server.start()
        self.server = server
        self._following = asyncio.create_task(self._health.follow())
        logger.info("gRPC (Open Inference Protocol v2) on %s:%d", settings.host, self.port)

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop taking calls (health NOT_SERVING first); calls in flight get ``grace_s`` to finish."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._following is not None:
            self._following.cancel()
            self._following = None
        if self.server is not None:
            await self.server.stop(grace_s)
            self.server = None
