from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.common import MAX_TOKENS, MAX_TOP_K, TaskRequest, examples
from service.tasks import QAInput, QAParams
from service.tasks.question_answering import DEFAULTS


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
        params = QAParams(
            top_k=self.top_k,
            doc_stride=self.doc_stride,
            max_answer_len=self.max_answer_len,
            max_seq_len=self.max_seq_len,
            max_question_len=self.max_question_len,
            handle_impossible_answer=self.handle_impossible_answer,
            score_aggregation=self.score_aggregation,
        )
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
