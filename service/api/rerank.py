"""Rerank routes: ``/v1/rerank`` (Cohere / Jina shape) and ``/rerank`` (TEI's).

Each document is one input of the task; the handler scores it, ``rank`` orders the scores, and each route shapes
the ranking for its protocol.
"""

from __future__ import annotations

from service.api.entry import Decoded, InferenceRoute, Protocol, Reply, json_reply
from service.core import InferenceResult
from service.tasks.rerank import (
    RelevanceScore,
    RerankRequest,
    RerankResponse,
    TeiRerankRequest,
    TeiRerankResponse,
    rank,
)


def rerank_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, RerankRequest)
    scores: list[RelevanceScore] = result.results
    documents = request.document_fields() if request.return_documents else []
    ranked = []
    for index in rank([item.score for item in scores], request.top_n):
        entry: dict[str, object] = {"index": index, "relevance_score": scores[index].score}
        if request.return_documents:
            entry["document"] = documents[index]
        ranked.append(entry)
    return json_reply({"model": result.model, "results": ranked})


def tei_rerank_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, TeiRerankRequest)
    scores: list[RelevanceScore] = result.results
    ranked = []
    for index in rank([item.score for item in scores]):
        entry: dict[str, object] = {
            "index": index,
            "score": scores[index].raw_score if request.raw_scores else scores[index].score,
        }
        if request.return_text:
            entry["text"] = request.texts[index]
        ranked.append(entry)
    return json_reply(ranked)


PROTOCOL = Protocol(
    "rerank",
    (
        InferenceRoute(
            "/v1/rerank",
            "rerank",
            "Rank documents by relevance to a query with a cross-encoder (the Cohere / Jina rerank shape).",
            "rerank",
            RerankResponse,
            rerank_answer,
            body=RerankRequest,
        ),
        InferenceRoute(
            "/rerank",
            "tei_rerank",
            "Rank texts by relevance to a query (text-embeddings-inference's ``/rerank``).",
            "rerank",
            TeiRerankResponse,
            tei_rerank_answer,
            body=TeiRerankRequest,
        ),
    ),
)
