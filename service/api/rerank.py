"""Rerank routes over the shared request path: ``/v1/rerank`` (Cohere / Jina shape) and ``/rerank`` (TEI's).

Each document is one input of ``run_inference``; the handler scores it, ``rank`` orders the scores, and each route
shapes the ranking for its protocol.
"""

from __future__ import annotations

import functools

from fastapi import APIRouter, Request, Response

from service.api.deps import RegistryDep, SettingsDep
from service.api.http import TASK_ERROR_RESPONSES, client_gone, json_response
from service.inference import InferenceRequest, run_inference
from service.registry import ModelRegistry
from service.schemas import RerankRequest, RerankResponse, TeiRerankRequest, TeiRerankResponse
from service.schemas.common import TaskRequest
from service.settings import Settings
from service.tasks.rerank import RelevanceScore, rank

router = APIRouter(tags=["rerank"])


async def score_documents(
    request: Request, body: TaskRequest, registry: ModelRegistry, settings: Settings
) -> tuple[str, list[RelevanceScore]]:
    """The body's documents through ``run_inference``: the answering model's name and a score per document."""
    inputs, params = body.to_task()
    inference = InferenceRequest(task=body.task, inputs=inputs, params=params, model=body.model)
    result = await run_inference(inference, registry, settings, functools.partial(client_gone, request))
    return result.model, result.results


@router.post("/v1/rerank", response_model=RerankResponse, responses=TASK_ERROR_RESPONSES)
async def rerank(body: RerankRequest, request: Request, registry: RegistryDep, settings: SettingsDep) -> Response:
    """Rank documents by relevance to a query with a cross-encoder (the Cohere / Jina rerank shape)."""
    model, scores = await score_documents(request, body, registry, settings)
    ranked = []
    for index in rank([item.score for item in scores], body.top_n):
        entry: dict[str, object] = {"index": index, "relevance_score": scores[index].score}
        if body.return_documents:
            entry["document"] = {"text": body.documents[index]}
        ranked.append(entry)
    return json_response({"model": model, "results": ranked})


@router.post("/rerank", response_model=TeiRerankResponse, responses=TASK_ERROR_RESPONSES)
async def tei_rerank(
    body: TeiRerankRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Rank texts by relevance to a query (text-embeddings-inference's ``/rerank``)."""
    _, scores = await score_documents(request, body, registry, settings)
    ranked = []
    for index in rank([item.score for item in scores]):
        entry: dict[str, object] = {
            "index": index,
            "score": scores[index].raw_score if body.raw_scores else scores[index].score,
        }
        if body.return_text:
            entry["text"] = body.texts[index]
        ranked.append(entry)
    return json_response(ranked)
