"""Open Inference Protocol (KServe v2 / Triton) REST bodies: health, metadata, infer request and response.

Field names and shapes follow the protocol: a tensor is ``{name, shape, datatype, parameters, data}`` with ``data``
flat (or nested) in row-major order; BYTES elements are JSON strings. With the binary tensor data extension an input
carries ``parameters.binary_data_size`` instead of ``data`` and its bytes follow the JSON in the body.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, RootModel

from service.schemas.common import examples

Parameters = dict[str, Any]
Shape = list[Annotated[int, Field(ge=0)]]


class V2Error(BaseModel):
    """The body of every 4xx/5xx answer on a ``/v2`` path."""

    model_config = examples({"error": "no model named 'x' (loaded: sst2)"})

    error: str


class V2Live(BaseModel):
    live: bool


class V2Ready(BaseModel):
    ready: bool


class V2ModelReady(BaseModel):
    name: str
    ready: bool


class V2ServerMetadata(BaseModel):
    name: str
    version: str
    extensions: list[str] = Field(
        description="Protocol extensions served: binary_tensor_data, model_repository, statistics."
    )


class V2TensorMetadata(BaseModel):
    name: str
    datatype: str = Field(description="BYTES, FP32 or INT64.")
    shape: list[int] = Field(description="-1 for a dimension that varies (the batch, a label count).")


class V2ModelMetadata(BaseModel):
    model_config = examples(
        {
            "name": "sst2",
            "versions": ["1"],
            "platform": "onnxruntime_onnx",
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
            "outputs": [
                {"name": "label", "datatype": "BYTES", "shape": [-1, -1]},
                {"name": "score", "datatype": "FP32", "shape": [-1, -1]},
            ],
        },
    )

    name: str
    versions: list[str]
    platform: str
    inputs: list[V2TensorMetadata]
    outputs: list[V2TensorMetadata]


class V2RequestInput(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str
    shape: Shape
    datatype: str
    parameters: Parameters | None = Field(None, description="binary_data_size: the tensor's bytes follow the JSON.")
    data: list[Any] | None = Field(None, description="Row-major elements (strings for BYTES); absent when binary.")


class V2RequestOutput(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str
    parameters: Parameters | None = Field(None, description="binary_data: true for this output's bytes after the JSON.")


class V2InferRequest(BaseModel):
    model_config = examples(
        {
            "inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["Great acting.", "Dull."]}],
            "parameters": {"top_k": 2},
        },
        strict=True,
    )

    id: str | None = None
    parameters: Parameters | None = Field(
        None, description="The task's options (top_k, aggregation_strategy, ...) and binary_data_output."
    )
    inputs: Annotated[list[V2RequestInput], Field(min_length=1)]
    outputs: list[V2RequestOutput] | None = Field(None, description="Which outputs to return; default all.")


class V2ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: Parameters | None = None
    data: list[Any] | None = None


class V2InferResponse(BaseModel):
    model_config = examples(
        {
            "model_name": "sst2",
            "model_version": "1",
            "outputs": [
                {"name": "label", "shape": [1, 1], "datatype": "BYTES", "data": ["positive"]},
                {"name": "score", "shape": [1, 1], "datatype": "FP32", "data": [0.998]},
            ],
        },
    )

    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[V2ResponseOutput]


def inline_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` written in place (for an ``openapi_extra`` request body)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref")
            if isinstance(reference, str) and reference.startswith("#/$defs/"):
                return resolve(definitions[reference.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in node.items()}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    resolved: dict[str, Any] = resolve(schema)
    return resolved


class V2RepositoryIndexRequest(BaseModel):
    """``POST /v2/repository/index``'s body (optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ready: bool = Field(False, description="Only the models that are ready (served now).")


class V2RepositoryModel(BaseModel):
    name: str
    version: str = Field(description="The served version; empty when the model is not served.")
    state: str = Field(description="READY (served), LOADING, or UNAVAILABLE (not loaded, or it failed to load).")
    reason: str = Field(description="Why the model is not served; empty when it is.")


class V2RepositoryIndexResponse(RootModel[list[V2RepositoryModel]]):
    """Every model of the repository (the models folder and the models named at start-up) and the served ones."""


class V2RepositoryModelRequest(BaseModel):
    """``POST /v2/repository/models/{name}/load`` or ``.../unload``'s body (optional). The model is always read
    from its bundle folder: a ``config`` or ``file:`` override (Triton's) is refused; ``unload_dependents`` is
    accepted (no model here depends on another)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    parameters: dict[str, Any] | None = Field(None, description="unload_dependents, a boolean (unload only).")


class V2SharedMemoryRegion(BaseModel):
    name: str
    key: str = Field(description="The shared memory object's key (its name in /dev/shm).")
    offset: int = Field(description="Where the region starts in the object, in bytes.")
    byte_size: int = Field(description="The region's size in bytes.")


class V2SharedMemoryStatus(RootModel[list[V2SharedMemoryRegion]]):
    """The registered system shared memory regions (every one, or the one named)."""


class V2SharedMemoryRegisterRequest(BaseModel):
    """``POST /v2/systemsharedmemory/region/{name}/register``'s body, as tritonclient's
    ``register_system_shared_memory`` sends it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    key: str = Field(description="The shared memory object's key, such as '/input_data' (an object in /dev/shm).")
    offset: int = Field(0, ge=0, description="Where the region starts in the object, in bytes.")
    byte_size: int = Field(ge=1, description="The region's size in bytes.")


class V2CudaSharedMemoryStatus(RootModel[list[dict[str, Any]]]):
    """The registered CUDA shared memory regions: none (this server reads tensors from system memory)."""


class V2Duration(BaseModel):
    count: int = Field(description="How many.")
    ns: int = Field(description="Their total time, in nanoseconds.")


class V2InferStatistics(BaseModel):
    success: V2Duration = Field(description="Requests answered, and their time in the model's engine.")
    fail: V2Duration = Field(
        description="Requests that failed once the model had them (4xx of their inputs, 429, 504)."
    )
    queue: V2Duration = Field(description="Per request: the longest wait of its rows for their batch.")
    compute_input: V2Duration = Field(description="compute_infer's count, 0 ns: padding a batch is inside it.")
    compute_infer: V2Duration = Field(description="Per request: the time of the batches that ran its rows.")
    compute_output: V2Duration = Field(description="compute_infer's count, 0 ns: splitting outputs is inside it.")
    cache_hit: V2Duration = Field(description="Zero: no response cache.")
    cache_miss: V2Duration = Field(description="Zero: no response cache.")


class V2BatchStatistics(BaseModel):
    batch_size: int = Field(description="Rows in the batch.")
    compute_input: V2Duration
    compute_infer: V2Duration = Field(description="Batches of this size run, and their time.")
    compute_output: V2Duration


class V2ModelStatistics(BaseModel):
    name: str
    version: str
    last_inference: int = Field(description="When the last request ended, in milliseconds since the epoch (0: none).")
    inference_count: int = Field(description="Inputs of the requests answered.")
    execution_count: int = Field(description="Batches run.")
    inference_stats: V2InferStatistics
    batch_stats: list[V2BatchStatistics] = Field(description="Per batch size, by size.")


class V2ModelStatisticsResponse(BaseModel):
    """Triton's statistics extension (``get_inference_statistics``): each model's counts since it was warmed up."""

    model_stats: list[V2ModelStatistics]


class V2ConfigInput(BaseModel):
    name: str
    data_type: str = Field(description="TYPE_STRING (the protocol's BYTES), TYPE_FP32 or TYPE_INT64.")
    dims: list[int] = Field(description="The metadata's shape: -1 for a dimension that varies.")
    optional: bool = False


class V2ConfigOutput(BaseModel):
    name: str
    data_type: str
    dims: list[int]


class V2InstanceGroup(BaseModel):
    name: str
    kind: str = Field(description="KIND_CPU or KIND_GPU.")
    count: int = Field(description="The model's workers.")
    gpus: list[int] = Field(default_factory=list, description="The GPU (KIND_GPU); empty on the CPU.")


class V2ModelConfig(BaseModel):
    """Triton's model configuration extension (``get_model_config``): the fields this service fills. The items of a
    request are the first dimension of its tensors and the service batches them itself, so ``max_batch_size`` is 0."""

    name: str
    platform: str
    backend: str
    max_batch_size: int
    input: list[V2ConfigInput]
    output: list[V2ConfigOutput]
    instance_group: list[V2InstanceGroup]
    default_model_filename: str
    parameters: dict[str, dict[str, str]] = Field(description='{"task": {"string_value": TASK}}.')


class V2LogSettings(BaseModel):
    """Triton's logging extension (``get_log_settings`` / ``update_log_settings``): the service's log threshold."""

    log_file: str = Field(description='Always "": the logs go to stderr.')
    log_info: bool = Field(description="INFO records (the access lines among them) are written.")
    log_warning: bool
    log_error: bool
    log_verbose_level: int = Field(description="1 or more: DEBUG records too.")
    log_format: str = Field(description="--log-format: text or json.")


class V2TraceSettings(BaseModel):
    """Triton's trace extension (``get_trace_settings`` / ``update_trace_settings``): which requests are traced."""

    trace_level: list[str] = Field(description='["TIMESTAMPS"]: requests are traced (spans per stage); ["OFF"]: none.')
    trace_rate: str = Field(description="N: every N-th request is traced.")
    trace_count: str = Field(description="Traces still to take (counted down as they are taken); -1: no end.")
    trace_mode: str = Field(description='Always "opentelemetry": traces go out as OpenTelemetry spans.')
    trace_file: str = Field(description='Always "": spans go to the OTLP exporter, not to files.')
    log_frequency: str = Field(description='Always "0": no trace files.')
