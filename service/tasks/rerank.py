"""Rerank: a cross-encoder scores ``[CLS] query [SEP] document [SEP]`` for each document of a request.

The head has one output (a relevance logit: score = sigmoid(logit), as sentence-transformers' CrossEncoder and
TEI give it) or two labels (score = the second, "relevant", label's softmax probability). The raw score is the
logit whose sigmoid is the score: the logit itself, or for two labels ``logit[1] - logit[0]``. Long documents are
truncated on the document side only (``only_second``), never the query; a query that leaves no room for a
document token is a client error. Every document is one input (one model row); the routers rank them with ``rank``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator

from service.errors import BadRequest
from service.oip import layouts as oip
from service.oip.codec import OutputTensor
from service.schemas.common import MAX_TOP_K, TaskRequest, examples
from service.tasks import base
from service.tasks.base import InputError, ModelContext, Prepared, TaskUnit

DIRECTIONS = ("right", "left")


@dataclass(frozen=True, slots=True)
class RerankParams:
    query: str
    truncate: bool = True  # False: a (query, document) pair longer than the model's max length is a client error
    truncation_direction: str = "right"  # which end of a long document is cut
    max_document_tokens: int | None = None  # cut each document to this many tokens (Cohere's max_tokens_per_doc)
    max_chunks: int | None = None  # score a long document as its best of N windows (Cohere's max_chunks_per_doc)


@dataclass(frozen=True, slots=True)
class RelevanceScore:
    """One document's answer: ``score`` in [0, 1] and ``raw_score``, the logit whose sigmoid it is."""

    score: float
    raw_score: float


def rank(scores: Sequence[float], top_n: int | None = None) -> list[int]:
    """Document indices by score, best first (equal scores keep the documents' order), the first ``top_n``."""
    order = sorted(range(len(scores)), key=lambda index: -scores[index])
    return order if top_n is None else order[:top_n]


def relevance(logits: np.ndarray) -> RelevanceScore:
    """A cross-encoder head's logits for one pair -> its relevance score and raw score."""
    logits = np.asarray(logits, dtype=np.float32).reshape(-1)
    if logits.shape[0] == 1:
        return RelevanceScore(score=float(base.sigmoid(logits)[0]), raw_score=float(logits[0]))
    if logits.shape[0] == 2:
        return RelevanceScore(score=float(base.softmax(logits)[1]), raw_score=float(logits[1] - logits[0]))
    raise ValueError(f"a rerank head gives 1 or 2 logits, this one gives {logits.shape[0]}")


def _check_params(params: RerankParams) -> str:
    base.require_text(params.query, "query")
    direction = params.truncation_direction.lower()
    if direction not in DIRECTIONS:
        known = ", ".join(DIRECTIONS)
        raise InputError(f"truncation_direction must be one of {known}, got {params.truncation_direction!r}")
    return direction


class RerankHandler:
    def prepare(self, ctx: ModelContext, inputs: list[Any], params: RerankParams) -> list[Prepared]:
        direction = _check_params(params)
        documents = [base.require_text(document, f"document {index}") for index, document in enumerate(inputs)]
        if not documents:
            raise InputError("no documents to rerank")
        query_tokens = len(ctx.tokenizer.encode(params.query, add_special_tokens=False))
        special = ctx.tokenizer.num_special_tokens_to_add(is_pair=True)
        if query_tokens + special >= ctx.max_length:
            raise InputError(
                f"the query is {query_tokens} tokens; with {special} special tokens it leaves no room for a document "
                f"in the model's {ctx.max_length} (queries are never truncated)"
            )
        pairs = [(params.query, document) for document in documents]
        limit = ctx.max_length
        if params.max_document_tokens is not None:
            limit = min(limit, query_tokens + special + params.max_document_tokens)
        if params.max_chunks is not None:  # each document in windows of what fits beside the query, the best scored
            tokenizer = base.truncating_tokenizer(ctx.tokenizer, limit, strategy="only_second")
            prepared = []
            for encoding in base.encode_batch(tokenizer, pairs, "query and document"):
                windows = [encoding, *encoding.overflowing][: params.max_chunks]
                prepared.append(Prepared([base.to_sequence(window) for window in windows], state=None))
            return prepared
        if params.truncate:
            tokenizer = base.truncating_tokenizer(ctx.tokenizer, limit, strategy="only_second", direction=direction)
            encodings = base.encode_batch(tokenizer, pairs, "query and document")
        else:
            encodings = base.encode_batch(ctx.tokenizer, pairs, "query and document")
            base.require_fit(
                encodings, ctx.max_length,
                lambda index, tokens: f"document {index} with the query is {tokens} tokens; the model takes at most "
                f"{ctx.max_length} (truncate: true cuts the document)",
            )  # fmt: skip
        return base.one_row_each(encodings)

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: RerankParams
    ) -> RelevanceScore:
        return max((relevance(output["logits"]) for output in outputs), key=lambda found: found.raw_score)


QUERY = "What is the capital of France?"
DOCUMENTS: list[Any] = ["Paris is the capital and largest city of France.", "Berlin is the capital of Germany."]


class RerankDocument(BaseModel):
    """Cohere's document object: ``text`` and any other fields, all echoed with ``return_documents``."""

    model_config = ConfigDict(extra="allow")
    text: str


class RerankRequest(TaskRequest):
    model_config = examples(
        {"query": QUERY, "documents": DOCUMENTS},
        {"model": "ms-marco", "query": QUERY, "documents": DOCUMENTS, "top_n": 1, "return_documents": True},
    )
    task: ClassVar[str] = "rerank"

    query: str = Field(description="What the documents are ranked against; never truncated.")
    documents: Annotated[list[str | RerankDocument], Field(min_length=1)] = Field(
        description='Texts to rank, or Cohere\'s document objects ({"text": ..., other fields}); each is truncated (at '
        "its end) to fit the model with the query, or windowed with max_chunks_per_doc."
    )
    top_n: int | None = Field(None, ge=1, le=MAX_TOP_K, description="Return only the best n; default all.")
    return_documents: bool = Field(False, description="Echo each document (every field of an object) in its result.")
    rank_fields: Annotated[list[str], Field(min_length=1)] | None = Field(
        None, description="Cohere v1: the document objects' fields ranked on, in this order (default: text); more "
        "than text is scored as the YAML of those fields (Cohere's format for structured documents).",
    )  # fmt: skip
    max_chunks_per_doc: int | None = Field(
        None, ge=1, description="Cohere v1: a long document is scored as the best of up to N windows of it, each "
        "beside the query, instead of being truncated.",
    )  # fmt: skip

    @field_validator("rank_fields")
    @classmethod
    def _distinct(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("each field may be named once")
        return value

    @model_validator(mode="after")
    def _fields_present(self) -> RerankRequest:
        if self.rank_fields is not None:
            for index, fields in enumerate(self.document_fields()):
                missing = [name for name in self.rank_fields if name not in fields]
                if missing:
                    raise ValueError(f"documents[{index}] has no field {missing[0]!r} named in rank_fields")
        return self

    def document_fields(self) -> list[dict[str, Any]]:
        """Each document as an object: a text is ``{"text": ...}``."""
        return [{"text": item} if isinstance(item, str) else item.model_dump() for item in self.documents]

    def texts(self) -> list[str]:
        """What each document is scored as: its text, or for other ``rank_fields`` those fields in their order as the
        YAML Cohere asks structured documents to be sent as (``yaml.dump(doc, sort_keys=False)``, unicode kept)."""
        if self.rank_fields is None or self.rank_fields == ["text"]:
            return [item if isinstance(item, str) else item.text for item in self.documents]
        return [
            yaml.dump({name: fields[name] for name in self.rank_fields}, sort_keys=False, allow_unicode=True)
            for fields in self.document_fields()
        ]

    def input_list(self) -> list[str]:
        return self.texts()

    def to_task(self) -> tuple[list[Any], RerankParams]:
        return self.texts(), RerankParams(query=self.query, max_chunks=self.max_chunks_per_doc)


class RerankResult(BaseModel):
    index: int = Field(description="Position of the document in the request's documents.")
    relevance_score: float = Field(description="Relevance in [0, 1]: the head's sigmoid (1 logit) or softmax (2).")
    document: RerankDocument | None = Field(None, description="The document, with return_documents only.")


class RerankResponse(BaseModel):
    model_config = examples(
        {
            "model": "ms-marco",
            "results": [
                {"index": 0, "relevance_score": 0.998, "document": {"text": DOCUMENTS[0]}},
                {"index": 1, "relevance_score": 0.004, "document": {"text": DOCUMENTS[1]}},
            ],
        },
    )

    model: str
    results: list[RerankResult] = Field(description="Documents by relevance, best first (at most top_n).")


class CohereV2RerankRequest(TaskRequest):
    """Cohere's v2 rerank body (``cohere.ClientV2.rerank``): documents are strings, results carry no document."""

    model_config = examples(
        {"model": "ms-marco", "query": QUERY, "documents": DOCUMENTS},
        {"model": "ms-marco", "query": QUERY, "documents": DOCUMENTS, "top_n": 1},
    )
    task: ClassVar[str] = "rerank"

    query: str = Field(description="What the documents are ranked against; never truncated.")
    documents: Annotated[list[str], Field(min_length=1)] = Field(
        description="Texts to rank; each is truncated (at its end) to fit the model with the query."
    )
    top_n: int | None = Field(None, ge=1, le=MAX_TOP_K, description="Return only the best n; default all.")
    max_tokens_per_doc: int | None = Field(
        None, ge=1, description="Cut each document to this many tokens (and always to what fits with the query)."
    )

    def input_list(self) -> list[str]:
        return self.documents

    def to_task(self) -> tuple[list[Any], RerankParams]:
        return list(self.documents), RerankParams(query=self.query, max_document_tokens=self.max_tokens_per_doc)


class CohereV2RerankResult(BaseModel):
    index: int = Field(description="Position of the document in the request's documents.")
    relevance_score: float = Field(description="Relevance in [0, 1].")


class CohereV2RerankResponse(BaseModel):
    model_config = examples({"id": "0b5f8d", "results": [{"index": 0, "relevance_score": 0.998}]})

    id: str = Field(description="This answer's id.")
    results: list[CohereV2RerankResult] = Field(description="Documents by relevance, best first (at most top_n).")


class TeiRerankRequest(TaskRequest):
    """text-embeddings-inference's ``/rerank`` body (``model`` is this service's addition)."""

    model_config = examples(
        {"query": QUERY, "texts": DOCUMENTS},
        {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True, "return_text": True, "truncate": True},
    )
    task: ClassVar[str] = "rerank"

    query: str = Field(description="What the texts are ranked against; never truncated.")
    texts: Annotated[list[str], Field(min_length=1)] = Field(description="Texts to rank.")
    raw_scores: bool = Field(False, description="Scores as the head's logit instead of its sigmoid.")
    return_text: bool = Field(False, description="Echo each text in its result.")
    truncate: bool | None = Field(
        False, description="Cut texts too long to fit with the query; false (TEI's default): such a text is a 400."
    )
    truncation_direction: Literal["Right", "Left"] = Field("Right", description="Which end of a long text is cut.")

    def input_list(self) -> list[str]:
        return self.texts

    def to_task(self) -> tuple[list[Any], RerankParams]:
        params = RerankParams(
            query=self.query, truncate=bool(self.truncate), truncation_direction=self.truncation_direction.lower()
        )
        return list(self.texts), params


class TeiRank(BaseModel):
    index: int = Field(description="Position of the text in the request's texts.")
    score: float = Field(description="Relevance in [0, 1], or the logit with raw_scores.")
    text: str | None = Field(None, description="The text, with return_text only.")


class TeiRerankResponse(RootModel[list[TeiRank]]):
    model_config = examples([{"index": 0, "score": 0.998}, {"index": 1, "score": 0.004}])


def oip_rerank_body(tensors: oip.Tensors) -> dict[str, Any]:
    query = tensors["query"]
    if len(query) != 1:
        raise BadRequest(f"input 'query' holds one text, not {len(query)}")
    return {"query": query[0], "documents": tensors["documents"]}


def oip_rerank_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    order = rank([item.score for item in results], request.top_n)
    return [
        OutputTensor("index", "INT64", (len(order),), np.asarray(order, dtype=np.int64)),
        OutputTensor("relevance_score", "FP32", (len(order),), np.asarray([results[i].score for i in order])),
    ]


OIP = oip.TaskLayout(
    RerankRequest,
    inputs=(oip.TensorSpec("query", "BYTES", (1,)), oip.TensorSpec("documents", "BYTES")),
    outputs=(oip.TensorSpec("index", "INT64"), oip.TensorSpec("relevance_score", "FP32")),
    options=("top_n",),
    body=oip_rerank_body,
    tensors=oip_rerank_tensors,
)


UNIT = TaskUnit("rerank", RerankHandler(), oip=OIP)
