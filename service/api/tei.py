"""text-embeddings-inference-compatible routes: ``POST /embed`` over the shared request path.

TEI's semantics: ``normalize`` defaults to true, ``truncate`` to false (a text longer than the model's max length
is a 400 naming its length). One addition: ``model`` names the model when several are loaded.
"""

from __future__ import annotations

import functools

from fastapi import APIRouter, Request, Response

from service.api.deps import RegistryDep, SettingsDep
from service.api.http import TASK_ERROR_RESPONSES, client_gone, json_response
from service.inference import InferenceRequest, run_inference
from service.schemas import TeiEmbedRequest, TeiEmbedResponse

router = APIRouter(tags=["tei"])


@router.post("/embed", response_model=TeiEmbedResponse, responses=TASK_ERROR_RESPONSES)
async def embed(body: TeiEmbedRequest, request: Request, registry: RegistryDep, settings: SettingsDep) -> Response:
    """Embed texts with a feature-extraction model (text-embeddings-inference's `/embed`): one vector per text,
    a list of lists also for a single text."""
    inputs, params = body.to_task()
    inference = InferenceRequest(task=body.task, inputs=inputs, params=params, model=body.model)
    result = await run_inference(inference, registry, settings, functools.partial(client_gone, request))
    return json_response([item.vector for item in result.results])
