"""Rerank bodies: ``/v1/rerank`` in the Cohere v1 / Jina shape, ``/v2/rerank`` in Cohere's v2 shape, ``/rerank`` in
text-embeddings-inference's shape."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, RootModel

from service.schemas.common import MAX_TOP_K, TaskRequest, examples
from service.tasks import RerankParams

QUERY = "What is the capital of France?"
DOCUMENTS: list[Any] = ["Paris is the capital and largest city of France.", "Berlin is the capital of Germany."]


class RerankRequest(TaskRequest):
    model_config = examples(
        {"query": QUERY, "documents": DOCUMENTS},
        {"model": "ms-marco", "query": QUERY, "documents": DOCUMENTS, "top_n": 1, "return_documents": True},
    )
    task: ClassVar[str] = "rerank"

    query: str = Field(description="What the documents are ranked against; never truncated.")
    documents: Annotated[list[str], Field(min_length=1)] = Field(
        description="Texts to rank; each is truncated (at its end) to fit the model with the query."
    )
    top_n: int | None = Field(None, ge=1, le=MAX_TOP_K, description="Return only the best n; default all.")
    return_documents: bool = Field(False, description="Echo each document's text in its result.")

    def input_list(self) -> list[str]:
        return self.documents

    def to_task(self) -> tuple[list[Any], RerankParams]:
        return list(self.documents), RerankParams(query=self.query)


class RerankDocument(BaseModel):
    text: str


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
        None, ge=1, description="Accepted for Cohere's clients; documents are cut to what fits the model anyway."
    )

    def input_list(self) -> list[str]:
        return self.documents

    def to_task(self) -> tuple[list[Any], RerankParams]:
        return list(self.documents), RerankParams(query=self.query)


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
