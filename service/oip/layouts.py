"""Each task's Open Inference Protocol tensors: what its inputs and outputs are called, typed and shaped.

A v2 request becomes the task's v1 request (``service.schemas``): the input tensors fill its input fields, the
request's ``parameters`` its options, and the v1 model validates the lot. The v1 results become output tensors.
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

from service.api.entry import encode_json
from service.errors import BadRequest
from service.oip.codec import OutputTensor
from service.schemas.common import TaskRequest
from service.tasks.feature_extraction import TeiEmbedRequest
from service.tasks.fill_mask import FillMaskRequest
from service.tasks.question_answering import QuestionAnsweringRequest
from service.tasks.rerank import RerankRequest, rank
from service.tasks.text_classification import TextClassificationRequest
from service.tasks.token_classification import TokenClassificationRequest
from service.tasks.zero_shot_classification import ZeroShotClassificationRequest

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
class TaskLayout:
    request: type[TaskRequest]  # the v1 request the tensors and parameters fill
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    options: tuple[str, ...]  # the v1 request's fields that ``parameters`` may set
    body: BodyBuilder  # input tensors -> the v1 request's input fields
    tensors: OutputBuilder  # (v1 request, its results) -> output tensors

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


def _classification_body(tensors: Tensors) -> dict[str, Any]:
    texts, *pairs = batch(tensors, "text", "text_pair")
    if pairs:
        return {"inputs": [{"text": text, "text_pair": pair} for text, pair in zip(texts, pairs[0], strict=True)]}
    return {"inputs": texts}


def _classification_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    rows = [[item["label"] for item in result] for result in results]
    return labels_and_scores(rows, [[item["score"] for item in result] for result in results])


def _qa_body(tensors: Tensors) -> dict[str, Any]:
    questions, contexts = batch(tensors, "question", "context")
    return {"inputs": [{"question": q, "context": c} for q, c in zip(questions, contexts, strict=True)]}


def _qa_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    answers = [answer for result in results for answer in result]
    flat = (len(answers),)
    return [
        OutputTensor("answer", "BYTES", flat, [answer["answer"] for answer in answers]),
        OutputTensor("score", "FP32", flat, np.asarray([a["score"] for a in answers], dtype=np.float32)),
        OutputTensor("start", "INT64", flat, np.asarray([a["start"] for a in answers], dtype=np.int64)),
        OutputTensor("end", "INT64", flat, np.asarray([a["end"] for a in answers], dtype=np.int64)),
        OutputTensor("answer_count", "INT64", (len(results),), np.asarray([len(r) for r in results], dtype=np.int64)),
    ]


def _texts_body(tensors: Tensors, *lists: str) -> dict[str, Any]:
    (texts,) = batch(tensors, "text")
    return {"inputs": texts, **{name: tensors[name] for name in lists if name in tensors}}


def _json_per_item(name: str) -> OutputBuilder:
    def build(request: Any, results: list[Any]) -> list[OutputTensor]:
        return [OutputTensor(name, "BYTES", (len(results),), [as_json(result) for result in results])]

    return build


def _embedding_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    vectors = np.stack([np.asarray(item.vector, dtype=np.float32) for item in results])
    return [OutputTensor("embedding", "FP32", vectors.shape, vectors.reshape(-1))]


def _rerank_body(tensors: Tensors) -> dict[str, Any]:
    query = tensors["query"]
    if len(query) != 1:
        raise BadRequest(f"input 'query' holds one text, not {len(query)}")
    return {"query": query[0], "documents": tensors["documents"]}


def _rerank_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    order = rank([item.score for item in results], request.top_n)
    return [
        OutputTensor("index", "INT64", (len(order),), np.asarray(order, dtype=np.int64)),
        OutputTensor("relevance_score", "FP32", (len(order),), np.asarray([results[i].score for i in order])),
    ]


def _zero_shot_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    return labels_and_scores([item["labels"] for item in results], [item["scores"] for item in results])


TEXT = TensorSpec("text", "BYTES")
LABELS = (TensorSpec("label", "BYTES", (BATCH, BATCH)), TensorSpec("score", "FP32", (BATCH, BATCH)))

LAYOUTS: dict[str, TaskLayout] = {
    "text-classification": TaskLayout(
        TextClassificationRequest,
        inputs=(TEXT, TensorSpec("text_pair", "BYTES", required=False)),
        outputs=LABELS,
        options=("top_k", "function_to_apply"),
        body=_classification_body,
        tensors=_classification_tensors,
    ),
    "token-classification": TaskLayout(
        TokenClassificationRequest,
        inputs=(TEXT, TensorSpec("ignore_labels", "BYTES", required=False)),
        outputs=(TensorSpec("entities", "BYTES"),),
        options=("aggregation_strategy", "stride"),
        body=lambda tensors: _texts_body(tensors, "ignore_labels"),
        tensors=_json_per_item("entities"),
    ),
    "question-answering": TaskLayout(
        QuestionAnsweringRequest,
        inputs=(TensorSpec("question", "BYTES"), TensorSpec("context", "BYTES")),
        outputs=(
            TensorSpec("answer", "BYTES"),
            TensorSpec("score", "FP32"),
            TensorSpec("start", "INT64"),
            TensorSpec("end", "INT64"),
            TensorSpec("answer_count", "INT64"),
        ),
        options=(
            "top_k",
            "doc_stride",
            "max_answer_len",
            "max_seq_len",
            "max_question_len",
            "handle_impossible_answer",
        ),
        body=_qa_body,
        tensors=_qa_tensors,
    ),
    "fill-mask": TaskLayout(
        FillMaskRequest,
        inputs=(TEXT, TensorSpec("targets", "BYTES", required=False)),
        outputs=(TensorSpec("predictions", "BYTES"),),
        options=("top_k",),
        body=lambda tensors: _texts_body(tensors, "targets"),
        tensors=_json_per_item("predictions"),
    ),
    "feature-extraction": TaskLayout(
        TeiEmbedRequest,
        inputs=(TEXT,),
        outputs=(TensorSpec("embedding", "FP32", (BATCH, BATCH)),),
        options=("normalize", "truncate", "truncation_direction"),
        body=_texts_body,
        tensors=_embedding_tensors,
    ),
    "rerank": TaskLayout(
        RerankRequest,
        inputs=(TensorSpec("query", "BYTES", (1,)), TensorSpec("documents", "BYTES")),
        outputs=(TensorSpec("index", "INT64"), TensorSpec("relevance_score", "FP32")),
        options=("top_n",),
        body=_rerank_body,
        tensors=_rerank_tensors,
    ),
    "zero-shot-classification": TaskLayout(
        ZeroShotClassificationRequest,
        inputs=(TEXT, TensorSpec("candidate_labels", "BYTES", required=False)),
        outputs=LABELS,
        options=("candidate_labels", "hypothesis_template", "multi_label"),
        body=lambda tensors: _texts_body(tensors, "candidate_labels"),
        tensors=_zero_shot_tensors,
    ),
}
