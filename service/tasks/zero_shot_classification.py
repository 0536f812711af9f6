"""Zero-shot classification with the semantics of transformers 4.57.6 ``ZeroShotClassificationPipeline``.

Each candidate label becomes a hypothesis (``hypothesis_template.format(label)``) and each (sequence, hypothesis)
pair one model row of an NLI head, truncated on the sequence side only (``only_first``). The entailment logit
scores the label: softmax over the labels, or, with ``multi_label`` or a single label, softmax of
[contradiction, entailment] for each label on its own. All rows of a request go to the batcher together.

One difference from the pipeline: a template may only hold ``{}`` (or ``{0}``) fields, never format specs or
attribute lookups (``str.format`` on a client's template could otherwise build huge strings).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, Field

from contract.tasks import task_spec
from service.oip import layouts as oip
from service.oip.codec import OutputTensor
from service.schemas.common import TaskRequest, examples
from service.tasks import base
from service.tasks.base import HfMapping, InputError, ModelContext, Prepared, TaskUnit, V1Route

DEFAULTS = task_spec("zero-shot-classification").pipeline_defaults
MAX_CANDIDATE_LABELS = 100


@dataclass(frozen=True, slots=True)
class ZeroShotParams:
    candidate_labels: str | tuple[str, ...]  # a list, or one string of comma-separated labels
    hypothesis_template: str = DEFAULTS["hypothesis_template"]
    multi_label: bool = DEFAULTS["multi_label"]


def parse_labels(candidate_labels: str | tuple[str, ...] | list[str]) -> list[str]:
    """The pipeline's rule: a string is split on commas (stripped, empty parts dropped); a list is taken as is."""
    if isinstance(candidate_labels, str):
        labels = [label.strip() for label in candidate_labels.split(",") if label.strip()]
    else:
        labels = list(candidate_labels)
    if not labels:
        raise InputError("candidate_labels is empty: give at least one label")
    if len(labels) > MAX_CANDIDATE_LABELS:
        raise InputError(f"{len(labels)} candidate labels; the limit is {MAX_CANDIDATE_LABELS}")
    for label in labels:
        if not isinstance(label, str):
            raise InputError(f"a candidate label must be a string, got {type(label).__name__}")
    return labels


def hypotheses(template: str, labels: list[str]) -> list[str]:
    """``template.format(label)`` for each label, for templates whose fields are all plain ``{}`` / ``{0}``."""
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)]
    except ValueError as exc:
        raise InputError(f"hypothesis_template {template!r} is not a format string: {exc}") from exc
    fields = [field for field in fields if field[0] is not None]
    if not fields:
        raise InputError(f"hypothesis_template {template!r} has no {{}} where the label goes")
    if any(name not in ("", "0") or spec or conversion for name, spec, conversion in fields):
        raise InputError(f"hypothesis_template {template!r} may only hold {{}} fields, without format specs")
    try:
        return [template.format(label) for label in labels]
    except (IndexError, ValueError) as exc:
        raise InputError(f"hypothesis_template {template!r} cannot be formatted: {exc}") from exc


def pipeline_softmax(values: np.ndarray) -> np.ndarray:
    """Softmax over the last axis as the pipeline writes it, ``exp(x) / sum(exp(x))`` in float32.

    Unshifted, so that the same logits give the pipeline's scores bit for bit and tied scores (saturated at 1.0
    with multi_label) come in its order; the shifted form only where the plain one overflows or underflows.
    """
    values = np.asarray(values, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore"):
        exps = np.exp(values)
        total = exps.sum(-1, keepdims=True)
    if np.isfinite(total).all() and (total > 0).all():
        return exps / total
    return base.softmax(values)


@dataclass(frozen=True, slots=True)
class _State:
    sequence: str
    labels: list[str]


class ZeroShotClassificationHandler:
    def prepare(self, ctx: ModelContext, inputs: list[Any], params: ZeroShotParams) -> list[Prepared]:
        labels = parse_labels(params.candidate_labels)
        texts = hypotheses(params.hypothesis_template, labels)
        sequences = [base.require_text(sequence, "sequence") for sequence in inputs]
        tokenizer = base.truncating_tokenizer(ctx.tokenizer, ctx.max_length, strategy="only_first")
        pairs = [(sequence, hypothesis) for sequence in sequences for hypothesis in texts]
        encodings = base.encode_batch(tokenizer, pairs, "sequence and hypothesis")
        count = len(labels)
        return [
            Prepared(
                sequences=[base.to_sequence(encoding) for encoding in encodings[start * count : (start + 1) * count]],
                state=_State(sequence, labels),
            )
            for start, sequence in enumerate(sequences)
        ]

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: ZeroShotParams
    ) -> dict[str, Any]:
        state: _State = prepared.state
        entailment = ctx.entailment_id
        if entailment is None:  # the bundle reader refuses such heads; an engine built around it gets this
            raise ValueError("the model's labels have no entailment label")
        logits = np.stack([np.asarray(output["logits"], dtype=np.float32) for output in outputs])  # (labels, classes)
        if params.multi_label or len(state.labels) == 1:
            contradiction = -1 if entailment == 0 else 0
            scores = pipeline_softmax(logits[:, [contradiction, entailment]])[:, 1]
        else:
            scores = pipeline_softmax(logits[:, entailment])
        order = list(reversed(scores.argsort()))
        return {
            "sequence": state.sequence,
            "labels": [state.labels[index] for index in order],
            "scores": [float(scores[index]) for index in order],
        }


class ZeroShotClassificationRequest(TaskRequest):
    model_config = examples(
        {"inputs": "The team won the match in extra time.", "candidate_labels": ["sports", "politics"]},
        {
            "model": "nli",
            "inputs": ["I need to fix my phone today!", "Lovely weather for a walk."],
            "candidate_labels": "urgent, phone, weather",
            "hypothesis_template": "This text is about {}.",
            "multi_label": True,
        },
    )
    task: ClassVar[str] = "zero-shot-classification"

    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(description="A text or a list of texts.")
    candidate_labels: str | Annotated[list[str], Field(min_length=1, max_length=MAX_CANDIDATE_LABELS)] = Field(
        description="The labels to choose from: a list, or one string of comma-separated labels."
    )
    hypothesis_template: str = Field(
        DEFAULTS["hypothesis_template"],
        description="The hypothesis each label is put into, at its {} (plain {} fields only).",
    )
    multi_label: bool = Field(
        DEFAULTS["multi_label"],
        description="Score each label on its own (entailment vs contradiction) instead of softmax over the labels.",
    )

    def input_list(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], ZeroShotParams]:
        labels = self.candidate_labels if isinstance(self.candidate_labels, str) else tuple(self.candidate_labels)
        params = base.params_from(self, ZeroShotParams, candidate_labels=labels)
        return list(self.input_list()), params


class ZeroShotResult(BaseModel):
    sequence: str = Field(description="The input text.")
    labels: list[str] = Field(description="The candidate labels, most likely first.")
    scores: list[float] = Field(description="Each label's score, in the order of labels.")


class ZeroShotClassificationResponse(BaseModel):
    model_config = examples(
        {
            "model": "nli",
            "results": [
                {
                    "sequence": "The team won the match in extra time.",
                    "labels": ["sports", "politics"],
                    "scores": [0.97, 0.03],
                }
            ],
        },
    )

    model: str
    results: list[ZeroShotResult] = Field(description="Per input (always a list), its labels by score, best first.")


def oip_zero_shot_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    return oip.labels_and_scores([item["labels"] for item in results], [item["scores"] for item in results])


def label_indices(request: Any) -> dict[str, int]:
    """Each candidate label's place in the request's list (a label given twice: its first place)."""
    return {label: index for index, label in reversed(list(enumerate(parse_labels(request.candidate_labels))))}


CLASSIFICATION = oip.Classification(  # every label is scored already: nothing to widen or narrow
    "score",
    widen=lambda request: request,
    narrow=lambda request, results: results,
    classes=lambda results: [list(zip(item["labels"], item["scores"], strict=True)) for item in results],
    indices=label_indices,
)

OIP = oip.TaskLayout(
    ZeroShotClassificationRequest,
    inputs=(oip.TEXT, oip.TensorSpec("candidate_labels", "BYTES", required=False)),
    outputs=oip.LABELS,
    options=("candidate_labels", "hypothesis_template", "multi_label"),
    body=lambda tensors: oip.texts_body(tensors, "candidate_labels"),
    tensors=oip_zero_shot_tensors,
    classification=CLASSIFICATION,
)


UNIT = TaskUnit(
    "zero-shot-classification",
    ZeroShotClassificationHandler(),
    V1Route(
        ZeroShotClassificationRequest,
        ZeroShotClassificationResponse,
        "Score texts against labels chosen per request with an NLI model (transformers' zero-shot pipeline).",
    ),
    HfMapping(ZeroShotClassificationRequest),
    oip=OIP,
)
