"""What a task's Open Inference Protocol tensors are (``TaskLayout``: names, types, shapes), and the builders the
tasks' layouts share; each task module declares its own layout (``service.tasks.<task>.UNIT.oip``).

A v2 request becomes the task's v1 request (its unit's, ``service.tasks``): the input tensors fill its input fields,
the request's ``parameters`` its options, and the v1 model validates the lot. The v1 results become output tensors.
So v2 answers are the v1 answers by construction, with the same validation and limits.

Outputs whose size is fixed by the request are plain tensors (labels BYTES, scores FP32, indices INT64). Ragged
ones are flattened with a count per input (question answering: ``answer_count``), or, where entries are nested
records with optional fields (entities, fill-mask predictions per mask), one JSON string per input (BYTES).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.api.bodies import encode_json
from service.errors import BadRequest
from service.oip.codec import OutputTensor
from service.schemas.common import TaskRequest

BATCH = -1  # a dimension that varies with the request


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str
    shape: tuple[int, ...] = (BATCH,)
    required: bool = True

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


Tensors = Mapping[str, list[str]]
BodyBuilder = Callable[[Tensors], dict[str, Any]]
OutputBuilder = Callable[[Any, list[Any]], list[OutputTensor]]


@dataclass(frozen=True)
class Classification:
    """Triton's classification extension on a task's outputs: ``output`` (class scores) asked for with
    ``classification: K`` answers each item's K best classes as BYTES ``"score:index:label"``, best first."""

    output: str
    widen: Callable[[TaskRequest], TaskRequest]  # the request asking for every class's score
    narrow: Callable[[TaskRequest, list[Any]], list[Any]]  # every class's results -> what the request asked for
    classes: Callable[[list[Any]], list[list[tuple[str, float]]]]  # results -> per item (label, score), best first
    # each class's index for a request (labels chosen per request); None: the model's own class ids (id2label)
    indices: Callable[[TaskRequest], dict[str, int]] | None = None


@dataclass(frozen=True)
class TaskLayout:
    request: type[TaskRequest]  # the v1 request the tensors and parameters fill
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    options: tuple[str, ...]  # the v1 request's fields that ``parameters`` may set
    body: BodyBuilder  # input tensors -> the v1 request's input fields
    tensors: OutputBuilder  # (v1 request, its results) -> output tensors
    classification: Classification | None = None  # which output Triton's classification ranks, if any

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.outputs)

    def task_request(self, tensors: Tensors, parameters: Mapping[str, Any], model: str) -> TaskRequest:
        """The v1 request; a pydantic ValidationError when the v1 model refuses it (as the v1 route would)."""
        known = {spec.name for spec in self.inputs}
        unknown = sorted(set(tensors) - known)
        if unknown:
            raise BadRequest(f"unknown input {unknown[0]!r}; this model takes: {', '.join(sorted(known))}")
        missing = [spec.name for spec in self.inputs if spec.required and spec.name not in tensors]
        if missing:
            raise BadRequest(f"missing input {missing[0]!r}; this model takes: {', '.join(sorted(known))}")
        not_options = sorted(set(parameters) - set(self.options))
        if not_options:
            allowed = ", ".join(self.options) or "none"
            raise BadRequest(f"unknown parameter {not_options[0]!r}; this model's parameters: {allowed}")
        body = self.body(tensors)
        both = sorted(set(body) & set(parameters))
        if both:
            raise BadRequest(f"{both[0]!r} is given both as an input and as a parameter")
        return self.request.model_validate_json(json.dumps({**body, **parameters, "model": model}))


def batch(tensors: Tensors, *names: str) -> list[list[str]]:
    """The named inputs (present ones), which must hold as many elements each: one per batch item."""
    present = [tensors[name] for name in names if name in tensors]
    counts = {len(values) for values in present}
    if len(counts) > 1:
        sizes = ", ".join(f"{name}: {len(tensors[name])}" for name in names if name in tensors)
        raise BadRequest(f"inputs must hold one element per batch item each ({sizes})")
    return present


def as_json(value: Any) -> str:
    return encode_json(value).decode()


def labels_and_scores(rows: list[list[str]], scores: list[list[float]]) -> list[OutputTensor]:
    """``label`` BYTES and ``score`` FP32, both (batch, labels per item)."""
    width = len(rows[0]) if rows else 0
    if any(len(row) != width for row in rows):
        raise AssertionError("every item of a batch gets as many labels")
    shape = (len(rows), width)
    return [
        OutputTensor("label", "BYTES", shape, [label for row in rows for label in row]),
        OutputTensor("score", "FP32", shape, np.asarray(scores, dtype=np.float32).reshape(-1)),
    ]


def texts_body(tensors: Tensors, *lists: str) -> dict[str, Any]:
    (texts,) = batch(tensors, "text")
    return {"inputs": texts, **{name: tensors[name] for name in lists if name in tensors}}


def json_per_item(name: str) -> OutputBuilder:
    def build(request: Any, results: list[Any]) -> list[OutputTensor]:
        return [OutputTensor(name, "BYTES", (len(results),), [as_json(result) for result in results])]

    return build


def texts_with_list(request: type[TaskRequest], extra: str, output: str, options: tuple[str, ...]) -> TaskLayout:
    """The layout of a task that takes ``text`` and an optional list (``extra``: fill-mask's targets, NER's
    ignore_labels) and answers one JSON string per item (``output``)."""
    return TaskLayout(
        request,
        inputs=(TEXT, TensorSpec(extra, "BYTES", required=False)),
        outputs=(TensorSpec(output, "BYTES"),),
        options=options,
        body=lambda tensors: texts_body(tensors, extra),
        tensors=json_per_item(output),
    )


TEXT = TensorSpec("text", "BYTES")
LABELS = (TensorSpec("label", "BYTES", (BATCH, BATCH)), TensorSpec("score", "FP32", (BATCH, BATCH)))
