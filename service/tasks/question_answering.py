"""Extractive question answering with the semantics of transformers 4.57.6 ``QuestionAnsweringPipeline``.

The context is split into overlapping windows (``only_second`` truncation to ``max_seq_len`` with
``doc_stride`` overlap); every window is one model row. Span decoding, the null answer, merging of
equal answers across windows and word alignment follow the pipeline's fast-tokenizer path. As in
that path, ``max_question_len`` is accepted but does not truncate the question: a question that
leaves no room for the context is a client error.

The windowing and decoding live in ``contract.decoding`` (torch-free), the one decode path that
fine-tuning's evaluation scores through too; this handler validates parameters, turns windows into
model rows and maps ``DecodeInputError`` to ``InputError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.decoding import QAWindows, check_room_for_context, decode_qa_answers, encode_question_contexts
from contract.decoding import resolve_window as resolve_window_sizes
from contract.tasks import task_spec
from service.tasks.base import (
    InputError,
    ModelContext,
    Prepared,
    as_input_error,
    require_text,
    require_top_k,
    to_sequence,
    truncating_tokenizer,
)

DEFAULTS = task_spec(
    "question-answering"
).pipeline_defaults  # stated once, in the task table


@dataclass(frozen=True, slots=True)
class QAInput:
    question: str
    context: str


@dataclass(frozen=True, slots=True)
class QAParams:
    """``None`` for ``doc_stride`` / ``max_seq_len`` means the pipeline's defaults:
    ``max_seq_len = min(max_length, 384)`` and ``doc_stride = min(max_seq_len // 2, 128)``."""

    top_k: int = DEFAULTS["top_k"]
    doc_stride: int | None = None
    max_answer_len: int = DEFAULTS["max_answer_len"]
    max_seq_len: int | None = None
    max_question_len: int = DEFAULTS["max_question_len"]
    handle_impossible_answer: bool = DEFAULTS["handle_impossible_answer"]
    score_aggregation: str = "sum"  # "max": equal answers of several windows keep the best score, in [0, 1]


def resolve_window(ctx: ModelContext, params: QAParams) -> tuple[int, int]:
    """``(max_seq_len, doc_stride)`` for this model, the pipeline's defaults where ``params`` has ``None``."""
    with as_input_error():
        return resolve_window_sizes(ctx.max_length, params.max_seq_len, params.doc_stride)


def _check_postprocess_params(params: QAParams) -> None:
    require_top_k(params.top_k)
    require_top_k(params.max_answer_len, "max_answer_len")


class QuestionAnsweringHandler:
    task: str = "question-answering"
    output_names: tuple[str, ...] = task_spec("question-answering").outputs

    def prepare(self, ctx: ModelContext, inputs: list[Any], params: QAParams) -> list[Prepared]:
        _check_postprocess_params(params)
        max_seq_len, doc_stride = resolve_window(ctx, params)
        pairs: list[tuple[str, str]] = []
        for item in inputs:
            if not isinstance(item, QAInput):
                raise InputError("a question-answering input needs a question and a context")
            pairs.append((require_text(item.question, "question"), require_text(item.context, "context")))
        with as_input_error():
            check_room_for_context(ctx.tokenizer, pairs, max_seq_len, doc_stride)
            tokenizer = truncating_tokenizer(ctx.tokenizer, max_seq_len, doc_stride, "only_second")
            encoded = encode_question_contexts(tokenizer, pairs, ctx.cls_token_id)
        return [Prepared(sequences=[to_sequence(window) for window in item.windows], state=item) for item in encoded]

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: QAParams
    ) -> list[dict[str, Any]]:
        _check_postprocess_params(params)
        encoded: QAWindows = prepared.state
        with as_input_error():
            return decode_qa_answers(
                encoded,
                [output["start_logits"] for output in outputs],
                [output["end_logits"] for output in outputs],
                top_k=params.top_k,
                max_answer_len=params.max_answer_len,
                handle_impossible_answer=params.handle_impossible_answer,
                score_aggregation=params.score_aggregation,
            )
