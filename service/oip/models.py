"""What both Open Inference Protocol transports (REST ``service.api.v2``, gRPC ``service.grpc``) say of the served
models: the server's name and version, each model's one version, its metadata, configuration, statistics and
readiness, the task request its input tensors and parameters make, the outputs a request asks for (Triton's
classification of class scores among them), and the repository's load and unload parameters. No FastAPI,
no gRPC: each transport shapes these for its wire."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from service.api.bodies import JSON_MEDIA_TYPE, invalid_value
from service.errors import BadRequest, ModelNotFound
from service.oip.codec import OutputTensor
from service.oip.layouts import Tensors
from service.schemas.common import TaskRequest
from service.tasks import LAYOUTS

if TYPE_CHECKING:
    from service.core import ModelRegistry
    from service.engine import Engine

SERVER_NAME = "bertserve"
SERVER_VERSION = "0.1.0"
VERSION = "1"  # every model's one version
PLATFORM = "onnxruntime_onnx"
UNLOAD_PARAMETERS = frozenset({"unload_dependents"})
RESERVED_PREFIX = "triton_"  # request parameters Triton keeps for itself
TIMEOUT, PRIORITY = "timeout", "priority"  # Triton's request parameters (tritonclient's infer(timeout=, priority=))
CLASSIFICATION = "classification"  # an output's parameter: its K best classes (tritonclient's class_count)


def find_engine(registry: ModelRegistry, name: str, version: str | None = None) -> Engine:
    """The engine serving ``name``; ModelNotFound for an unknown name or a version other than 1."""
    engine = registry.select(None, name)
    if version is not None and version != VERSION:
        raise ModelNotFound(f"model {name!r} has no version {version!r} (versions: {VERSION})")
    return engine


def statistics_of(registry: ModelRegistry, name: str = "", version: str | None = None) -> list[dict[str, Any]]:
    """Triton's statistics extension: the named model's ``model_stat`` (``service.statistics``), or every served
    model's, by name, when ``name`` is empty."""
    engines = (
        [find_engine(registry, name, version)] if name else [registry.engines[key] for key in sorted(registry.engines)]
    )
    return [engine.statistics.to_json(engine.name, VERSION) for engine in engines]


def config_of(engine: Engine) -> dict[str, Any]:
    """Triton's model configuration extension (``get_model_config``; what perf_analyzer reads before it sends): the
    metadata's tensors as config inputs and outputs, ``max_batch_size`` 0 (a tensor's first dimension is the request's
    items, batched by the service itself, not a batch dimension Triton would add), the workers as an instance group.
    Protobuf's JSON names, as Triton answers over REST."""
    layout = LAYOUTS[engine.task]
    cuda = engine.device.is_cuda
    group = {"name": engine.name, "kind": "KIND_GPU" if cuda else "KIND_CPU", "count": len(engine.workers),
             "gpus": [engine.device.index] if cuda else []}  # fmt: skip
    return {
        "name": engine.name,
        "platform": PLATFORM,
        "backend": "onnxruntime",
        "max_batch_size": 0,
        "input": [
            {
                "name": spec.name,
                "data_type": config_type(spec.datatype),
                "dims": list(spec.shape),
                "optional": not spec.required,
            }
            for spec in layout.inputs
        ],
        "output": [
            {"name": spec.name, "data_type": config_type(spec.datatype), "dims": list(spec.shape)}
            for spec in layout.outputs
        ],
        "instance_group": [group],
        "default_model_filename": "model.onnx",
        "parameters": {"task": {"string_value": engine.task}},
    }


def config_type(datatype: str) -> str:
    """A protocol datatype (BYTES, FP32, INT64) as the model configuration names it."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def is_ready(registry: ModelRegistry, engine: Engine) -> bool:
    return not registry.shutting_down and engine.ready


def metadata_of(engine: Engine) -> dict[str, Any]:
    """The protocol's model metadata: name, versions, platform, and the task layout's tensors."""
    layout = LAYOUTS[engine.task]
    return {
        "name": engine.name,
        "versions": [VERSION],
        "platform": PLATFORM,
        "inputs": [spec.metadata() for spec in layout.inputs],
        "outputs": [spec.metadata() for spec in layout.outputs],
    }


@dataclass(frozen=True, slots=True)
class RequestParameters:
    options: dict[str, Any]  # the task's options
    timeout_s: float | None = None  # the request's own deadline (Triton's ``timeout``), None: the server's


def request_parameters(parameters: Mapping[str, Any]) -> RequestParameters:
    """An infer request's parameters: the task's options, and Triton's own request parameters taken out. ``timeout``
    (microseconds, tritonclient's ``infer(timeout=...)``; 0: none) is the request's deadline when shorter than
    ``timeout_s`` (a 504 / DEADLINE_EXCEEDED past it); ``priority`` is accepted (every request has one priority here);
    the reserved ``triton_*`` ones (perf_analyzer sends ``triton_enable_empty_final_response``, a streaming option)
    say nothing to a model that answers once."""
    options: dict[str, Any] = {}
    timeout_s = None
    for name, value in parameters.items():
        if name in (TIMEOUT, PRIORITY):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise BadRequest(f"parameter {name!r} must be a whole number, 0 or more (timeout: microseconds)")
            if name == TIMEOUT and value:
                timeout_s = value / 1e6
        elif not name.startswith(RESERVED_PREFIX):
            options[name] = value
    return RequestParameters(options, timeout_s)


def task_request(engine: Engine, tensors: Tensors, options: Mapping[str, Any]) -> TaskRequest:
    """The engine's task request from input tensors and the task's options, validated as its v1 route validates it."""
    try:
        return LAYOUTS[engine.task].task_request(tensors, options, engine.name)
    except ValidationError as exc:
        raise invalid_value(exc, JSON_MEDIA_TYPE) from None


def chosen_outputs(outputs: Sequence[OutputTensor], names: Sequence[str] | None) -> list[OutputTensor]:
    """The outputs named (in request order), all of them when ``names`` is None; BadRequest for an unknown name."""
    if names is None:
        return list(outputs)
    by_name = {output.name: output for output in outputs}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise BadRequest(f"unknown output {unknown[0]!r}; this model gives: {', '.join(by_name)}")
    return [by_name[name] for name in names]


def classification_counts(parameters: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Each requested output's ``classification`` count (Triton's classification extension: its K best classes),
    from the outputs' parameters by name; BadRequest for a count that is not a positive whole number."""
    counts = {}
    for name, given in parameters.items():
        count = given.get(CLASSIFICATION)
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise BadRequest(f"output {name!r}: classification is a class count, a whole number from 1")
        counts[name] = count
    return counts


def classified_request(engine: Engine, request: TaskRequest, counts: Mapping[str, int]) -> TaskRequest:
    """The request to run: ``request`` itself, or, when outputs are to be classified, the one asking for every
    class's score; BadRequest where the task or the output has no classes to rank."""
    if not counts:
        return request
    ranking = LAYOUTS[engine.task].classification
    if ranking is None:
        raise BadRequest(f"classification ranks class scores: a {engine.task} model's outputs have none")
    wrong = sorted(set(counts) - {ranking.output})
    if wrong:
        raise BadRequest(f"output {wrong[0]!r} cannot be classified: classification ranks {ranking.output!r}")
    return ranking.widen(request)


def output_tensors(engine: Engine, request: TaskRequest, results: list[Any], counts: Mapping[str, int]) -> list[Any]:
    """The task's output tensors for ``request`` (as asked) from ``results`` (of ``classified_request``), the
    classified output as Triton gives it: BYTES (items, K) of ``"score:index:label"``, K at most the classes (the
    index: the model's class id, or the label's place among the request's own labels)."""
    layout = LAYOUTS[engine.task]
    ranking = layout.classification
    if not counts or ranking is None:
        return layout.tensors(request, results)
    if ranking.indices is not None:
        ids = ranking.indices(request)
    else:
        ids = {label: index for index, label in engine.bundle.spec.id2label.items()}
    ranked = [row[: counts[ranking.output]] for row in ranking.classes(results)]
    strings = [
        f"{score:f}:{ids.get(label, label.removeprefix('LABEL_'))}:{label}" for row in ranked for label, score in row
    ]
    classified = OutputTensor(ranking.output, "BYTES", (len(ranked), len(ranked[0]) if ranked else 0), strings)
    plain = layout.tensors(request, ranking.narrow(request, results))
    return [classified if output.name == ranking.output else output for output in plain]


def check_load_parameters(parameters: Mapping[str, Any]) -> None:
    if parameters:
        raise BadRequest("a load takes no parameters: the model is read from its bundle folder")


def check_unload_parameters(parameters: Mapping[str, Any]) -> None:
    unknown = sorted(set(parameters) - UNLOAD_PARAMETERS)
    if unknown:
        raise BadRequest(f"unknown unload parameter {unknown[0]!r} (unload takes: unload_dependents)")
    if not isinstance(parameters.get("unload_dependents", False), bool):
        raise BadRequest("unload_dependents is a boolean")
