"""Cohere's v2 rerank: ``POST /v2/rerank`` as ``cohere.ClientV2(base_url=...).rerank`` posts it.

The same ranking as ``/v1/rerank`` (Cohere's v1 shape, ``service.api.rerank``), in v2's answer: ``id`` and
``results`` of ``index`` and ``relevance_score``, no documents. It sits beside the Open Inference Protocol's
``/v2/models/...`` and ``/v2/health/...`` routes, whose paths it does not share.
"""

from __future__ import annotations

import uuid

from service.api.entry import Decoded, InferenceRoute, Protocol, Reply, json_reply
from service.core import InferenceResult
from service.tasks.rerank import CohereV2RerankRequest, CohereV2RerankResponse, RelevanceScore, rank


def rerank_v2_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, CohereV2RerankRequest)
    scores: list[RelevanceScore] = result.results
    ranked = [
        {"index": index, "relevance_score": scores[index].score}
        for index in rank([item.score for item in scores], request.top_n)
    ]
    return json_reply({"id": uuid.uuid4().hex, "results": ranked})


PROTOCOL = Protocol(
    "cohere",
    (
        InferenceRoute(
            "/v2/rerank",
            "rerank_v2",
            "Rank documents by relevance to a query with a cross-encoder (Cohere's v2 rerank shape).",
            "rerank",
            CohereV2RerankResponse,
            rerank_v2_answer,
            body=CohereV2RerankRequest,
        ),
    ),
)
