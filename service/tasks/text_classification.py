"""Text classification with the semantics of transformers 4.57.6 ``TextClassificationPipeline``.

An input longer than the model's ``max_length`` is an input error naming its length, as the pipeline
fails on it by default. ``truncation=True`` cuts it to ``max_length`` (longest-first for text pairs),
as the pipeline does when called with ``truncation=True``. ``long_text="chunk"`` (no peer does this)
classifies it in windows of ``max_length`` tokens (pairs: windows over the longer text), each one
model row batched like any other; the windows' logits are averaged, weighted by each window's length,
before the score function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from contract.tasks import task_spec
from service.oip import layouts as oip
from service.oip.codec import OutputTensor
from service.schemas.common import MAX_TOP_K, TaskRequest, examples
from service.tasks import base
from service.tasks.base import HfMapping, InputError, ModelContext, Prepared, TaskUnit, V1Route

DEFAULTS = task_spec("text-classification").pipeline_defaults  # stated once, in the task table

ClassificationInput = str | tuple[str, str]
FUNCTIONS = ("sigmoid", "softmax", "none")


@dataclass(frozen=True, slots=True)
class ClassificationParams:
    top_k: int | None = DEFAULTS["top_k"]
    function_to_apply: str | None = DEFAULTS["function_to_apply"]
    truncation: bool = False
    long_text: str | None = None  # "chunk": classify long inputs in windows
    truncation_direction: str = "right"  # which end truncation cuts ("left": Cohere's truncate START)


def default_function(ctx: ModelContext) -> str:
    """transformers' choice when ``function_to_apply`` is not given."""
    num_labels = len(ctx.id2label)
    if ctx.problem_type == "regression":
        return "none"
    if ctx.problem_type == "multi_label_classification" or num_labels == 1:
        return "sigmoid"
    if ctx.problem_type == "single_label_classification" or num_labels > 1:
        return "softmax"
    return "none"


def _check_params(params: ClassificationParams) -> str | None:
    if params.top_k is not None:
        base.require_top_k(params.top_k)
    if params.function_to_apply is None:
        return None
    function = params.function_to_apply.lower()
    if function not in FUNCTIONS:
        raise InputError(f"function_to_apply must be one of {', '.join(FUNCTIONS)}, got {params.function_to_apply!r}")
    return function


def _check_long_text(params: ClassificationParams) -> None:
    if params.long_text not in (None, "chunk"):
        raise InputError(f'long_text must be "chunk" or null, got {params.long_text!r}')
    if params.long_text is not None and params.truncation:
        raise InputError('truncation and long_text "chunk" exclude each other: pick one')


def _as_tokenizer_input(item: Any) -> str | tuple[str, str]:
    if isinstance(item, str):
        return base.require_text(item)
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return base.require_text(item[0], "text"), base.require_text(item[1], "text_pair")
    raise InputError("a text-classification input is a text or a (text, text_pair) pair")


class TextClassificationHandler:
    def prepare(self, ctx: ModelContext, inputs: list[Any], params: ClassificationParams) -> list[Prepared]:
        _check_params(params)
        _check_long_text(params)
        texts = [_as_tokenizer_input(item) for item in inputs]
        if params.long_text == "chunk":
            tokenizer = base.truncating_tokenizer(ctx.tokenizer, ctx.max_length)
            prepared = []
            for encoding in base.encode_batch(tokenizer, texts, "text"):
                windows = [encoding, *encoding.overflowing]  # transformers' order
                weights = np.array([len(window.ids) for window in windows], dtype=np.float64)
                prepared.append(
                    Prepared([base.to_sequence(window) for window in windows], state=weights / weights.sum())
                )
            return prepared
        if params.truncation:
            tokenizer = base.truncating_tokenizer(ctx.tokenizer, ctx.max_length, direction=params.truncation_direction)
            encodings = base.encode_batch(tokenizer, texts, "text")
        else:
            encodings = base.encode_batch(ctx.tokenizer, texts, "text")
            base.require_fit(
                encodings, ctx.max_length,
                lambda index, tokens: f"input {index} is {tokens} tokens long; the model takes at most "
                f'{ctx.max_length}: send "truncation": true to cut it, or "long_text": "chunk" to classify it in '
                "windows (on Cohere's /v1/classify truncate: END or START)",
            )  # fmt: skip
        return base.one_row_each(encodings)

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: ClassificationParams
    ) -> list[dict[str, Any]]:
        # checked in prepare: the request's function, lower-cased, else transformers' choice
        function = params.function_to_apply.lower() if params.function_to_apply else default_function(ctx)
        if prepared.state is None:
            logits = np.asarray(outputs[0]["logits"])
        else:  # windows of one long input: their logits averaged, weighted by window length
            stacked = np.stack([np.asarray(output["logits"]) for output in outputs])
            logits = (stacked * prepared.state[:, None]).sum(axis=0).astype(stacked.dtype)
        if function == "sigmoid":
            scores = base.sigmoid(logits)
        elif function == "softmax":
            scores = base.softmax(logits)
        else:
            scores = logits
        results: list[dict[str, Any]] = [
            {"label": ctx.id2label.get(index, f"LABEL_{index}"), "score": float(score)}
            for index, score in enumerate(scores)
        ]
        results.sort(key=lambda result: result["score"], reverse=True)
        return results if params.top_k is None else results[: params.top_k]


class TextPair(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    text_pair: str


TextInput = str | TextPair


class TextClassificationRequest(TaskRequest):
    model_config = examples(
        {"inputs": "A wonderful, moving film."},
        {"model": "sst2", "inputs": ["Great acting.", "Dull and far too long."], "top_k": 2},
        {"inputs": {"text": "A man is eating.", "text_pair": "Someone eats food."}, "top_k": None},
        {"inputs": "A long review that goes on and on ...", "long_text": "chunk"},
    )
    task: ClassVar[str] = "text-classification"

    inputs: TextInput | Annotated[list[TextInput], Field(min_length=1)] = Field(
        description="A text, a {text, text_pair} pair, or a list of either."
    )
    top_k: int | None = Field(
        DEFAULTS["top_k"], ge=1, le=MAX_TOP_K, description="How many labels per input; null for all labels."
    )
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = Field(
        DEFAULTS["function_to_apply"],
        description="Score function; default as transformers picks it (softmax, or sigmoid for multi-label).",
    )

    truncation: bool = Field(
        False,
        description="Cut an input longer than the model's max length to fit (as transformers' truncation=True); "
        "without it (and without long_text) such an input is a 400 naming its length.",
    )
    long_text: Literal["chunk"] | None = Field(
        None,
        description='"chunk": classify an input longer than the model\'s max length in windows of max length tokens, '
        "their logits averaged (weighted by window length); excludes truncation.",
    )

    def input_list(self) -> list[TextInput]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], ClassificationParams]:
        inputs = [item if isinstance(item, str) else (item.text, item.text_pair) for item in self.input_list()]
        params = base.params_from(self, ClassificationParams)
        return inputs, params


class LabelScore(BaseModel):
    label: str
    score: float


class TextClassificationResponse(BaseModel):
    model_config = examples({"model": "sst2", "results": [[{"label": "positive", "score": 0.998}]]})

    model: str
    results: list[list[LabelScore]] = Field(description="Per input (always a list), labels by score, best first.")


def oip_classification_body(tensors: oip.Tensors) -> dict[str, Any]:
    texts, *pairs = oip.batch(tensors, "text", "text_pair")
    if pairs:
        return {"inputs": [{"text": text, "text_pair": pair} for text, pair in zip(texts, pairs[0], strict=True)]}
    return {"inputs": texts}


def oip_classification_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    rows = [[item["label"] for item in result] for result in results]
    return oip.labels_and_scores(rows, [[item["score"] for item in result] for result in results])


def asked_labels(request: Any, results: list[Any]) -> list[Any]:
    """Every label's results (best first, ``top_k`` null) cut to the ``top_k`` the request asked for."""
    return results if request.top_k is None else [result[: request.top_k] for result in results]


# Triton's classification of ``score`` (tritonclient's class_count): every label scored, the best K as strings
CLASSIFICATION = oip.Classification(
    "score",
    widen=lambda request: request.model_copy(update={"top_k": None}),
    narrow=asked_labels,
    classes=lambda results: [[(item["label"], item["score"]) for item in result] for result in results],
)

OIP = oip.TaskLayout(
    TextClassificationRequest,
    inputs=(oip.TEXT, oip.TensorSpec("text_pair", "BYTES", required=False)),
    outputs=oip.LABELS,
    options=("top_k", "function_to_apply"),
    body=oip_classification_body,
    tensors=oip_classification_tensors,
    classification=CLASSIFICATION,
)


UNIT = TaskUnit(
    "text-classification",
    TextClassificationHandler(),
    V1Route(
        TextClassificationRequest,
        TextClassificationResponse,
        "Label texts or text pairs (transformers' text-classification pipeline semantics).",
    ),
    # A list of labels per input, also for one text: what huggingface_hub's client reads.
    HfMapping(TextClassificationRequest, answer=lambda request, results, single: results),
    oip=OIP,
)
