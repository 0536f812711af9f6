"""Extractive question answering with the semantics of transformers 4.57.6 ``QuestionAnsweringPipeline``.

The context is split into overlapping windows (``only_second`` truncation to ``max_seq_len`` with
``doc_stride`` overlap); every window is one model row. Span decoding, the null answer, merging of
equal answers across windows and word alignment follow the pipeline's fast-tokenizer path. As in
that path, ``max_question_len`` is accepted but does not truncate the question: a question that
leaves no room for the context is a client error.

The windowing and decoding live in ``contract.decoding`` (torch-free), the one decode path that
fine-tuning's evaluation scores through too; this handler validates parameters, turns windows into
model rows (its ``InputError`` is the contract's ``DecodeInputError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from contract.decoding import QAWindows, check_room_for_context, decode_qa_answers, encode_question_contexts
from contract.decoding import resolve_window as resolve_window_sizes
from contract.tasks import task_spec
from service.oip import layouts as oip
from service.oip.codec import OutputTensor
from service.schemas.common import MAX_TOKENS, MAX_TOP_K, TaskRequest, examples
from service.tasks import base
from service.tasks.base import HfMapping, InputError, ModelContext, Prepared, TaskUnit, V1Route

DEFAULTS = task_spec("question-answering").pipeline_defaults  # stated once, in the task table


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


def _check_postprocess_params(params: QAParams) -> None:
    base.require_top_k(params.top_k)
    base.require_top_k(params.max_answer_len, "max_answer_len")


class QuestionAnsweringHandler:
    def prepare(self, ctx: ModelContext, inputs: list[Any], params: QAParams) -> list[Prepared]:
        _check_postprocess_params(params)  # before any tokenizing: postprocess (decode_qa_answers) checks them too
        max_seq_len, doc_stride = resolve_window_sizes(ctx.max_length, params.max_seq_len, params.doc_stride)
        pairs: list[tuple[str, str]] = []
        for item in inputs:
            if not isinstance(item, QAInput):
                raise InputError("a question-answering input needs a question and a context")
            pairs.append((base.require_text(item.question, "question"), base.require_text(item.context, "context")))
        check_room_for_context(ctx.tokenizer, pairs, max_seq_len, doc_stride)
        tokenizer = base.truncating_tokenizer(ctx.tokenizer, max_seq_len, doc_stride, "only_second")
        encoded = encode_question_contexts(tokenizer, pairs, ctx.cls_token_id)
        return [
            Prepared(sequences=[base.to_sequence(window) for window in item.windows], state=item) for item in encoded
        ]

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: QAParams
    ) -> list[dict[str, Any]]:
        encoded: QAWindows = prepared.state
        return decode_qa_answers(
            encoded,
            [output["start_logits"] for output in outputs],
            [output["end_logits"] for output in outputs],
            top_k=params.top_k,
            max_answer_len=params.max_answer_len,
            handle_impossible_answer=params.handle_impossible_answer,
            score_aggregation=params.score_aggregation,
        )


class QAPair(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    question: str
    context: str


class QuestionAnsweringRequest(TaskRequest):
    model_config = examples(
        {"inputs": {"question": "Where does John live?", "context": "John lives in Paris with his family."}},
        {
            "model": "squad",
            "inputs": [{"question": "Who wrote it?", "context": "The book was written by Mary Smith."}],
            "top_k": 3,
            "handle_impossible_answer": True,
        },
    )
    task: ClassVar[str] = "question-answering"

    inputs: QAPair | Annotated[list[QAPair], Field(min_length=1)] = Field(
        description="A {question, context} pair or a list of them."
    )
    top_k: int = Field(DEFAULTS["top_k"], ge=1, le=MAX_TOP_K, description="Answers per input.")
    doc_stride: int | None = Field(
        None, ge=0, le=MAX_TOKENS, description="Overlap of context windows; default min(max_seq_len // 2, 128)."
    )
    max_answer_len: int = Field(
        DEFAULTS["max_answer_len"], ge=1, le=MAX_TOKENS, description="Longest answer, in tokens."
    )
    max_seq_len: int | None = Field(
        None,
        ge=2,
        le=MAX_TOKENS,
        description="Tokens per window, question included; default min(max length, 384).",
    )
    max_question_len: int = Field(DEFAULTS["max_question_len"], ge=1, le=MAX_TOKENS)
    handle_impossible_answer: bool = Field(
        DEFAULTS["handle_impossible_answer"], description="Allow the empty answer (SQuAD v2 style)."
    )
    score_aggregation: Literal["sum", "max"] = Field(
        "sum",
        description="How equal answers found in several windows (or spans) merge: sum adds their scores, as "
        "transformers does, so a score can exceed 1; max keeps the best one, a probability in [0, 1].",
    )

    def input_list(self) -> list[QAPair]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], QAParams]:
        inputs = [QAInput(question=item.question, context=item.context) for item in self.input_list()]
        params = base.params_from(self, QAParams)
        return inputs, params


class QAAnswer(BaseModel):
    answer: str
    score: float = Field(
        description="The answer's probability, summed over the windows and spans that found the same answer "
        "(so it can exceed 1) unless score_aggregation is max."
    )
    start: int = Field(description="Character offset of the answer in the context.")
    end: int = Field(description="Character offset just past the answer.")


class QuestionAnsweringResponse(BaseModel):
    model_config = examples(
        {"model": "squad", "results": [[{"answer": "Paris", "score": 0.93, "start": 14, "end": 19}]]},
    )

    model: str
    results: list[list[QAAnswer]] = Field(description="Per input (always a list), answers by score, best first.")


def hf_answer(request: QuestionAnsweringRequest, results: list[Any], single: bool) -> Any:
    """The pipeline's answer: an answer object when ``top_k`` is 1, else the list."""
    answers = [result[0] for result in results] if request.top_k == 1 else results
    return base.pipeline_answer(request, answers, single)


def oip_qa_body(tensors: oip.Tensors) -> dict[str, Any]:
    questions, contexts = oip.batch(tensors, "question", "context")
    return {"inputs": [{"question": q, "context": c} for q, c in zip(questions, contexts, strict=True)]}


def oip_qa_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    answers = [answer for result in results for answer in result]
    flat = (len(answers),)
    return [
        OutputTensor("answer", "BYTES", flat, [answer["answer"] for answer in answers]),
        OutputTensor("score", "FP32", flat, np.asarray([a["score"] for a in answers], dtype=np.float32)),
        OutputTensor("start", "INT64", flat, np.asarray([a["start"] for a in answers], dtype=np.int64)),
        OutputTensor("end", "INT64", flat, np.asarray([a["end"] for a in answers], dtype=np.int64)),
        OutputTensor("answer_count", "INT64", (len(results),), np.asarray([len(r) for r in results], dtype=np.int64)),
    ]


OIP = oip.TaskLayout(
    QuestionAnsweringRequest,
    inputs=(oip.TensorSpec("question", "BYTES"), oip.TensorSpec("context", "BYTES")),
    outputs=(
        oip.TensorSpec("answer", "BYTES"),
        oip.TensorSpec("score", "FP32"),
        oip.TensorSpec("start", "INT64"),
        oip.TensorSpec("end", "INT64"),
        oip.TensorSpec("answer_count", "INT64"),
    ),
    options=(
        "top_k",
        "doc_stride",
        "max_answer_len",
        "max_seq_len",
        "max_question_len",
        "handle_impossible_answer",
    ),
    body=oip_qa_body,
    tensors=oip_qa_tensors,
)


UNIT = TaskUnit(
    "question-answering",
    QuestionAnsweringHandler(),
    V1Route(
        QuestionAnsweringRequest,
        QuestionAnsweringResponse,
        "Extract answer spans from contexts (transformers' question-answering pipeline semantics).",
    ),
    HfMapping(QuestionAnsweringRequest, answer=hf_answer),
    oip=OIP,
)
