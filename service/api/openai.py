"""OpenAI-compatible routes: ``POST /v1/embeddings`` over the shared request path.

The official ``openai`` client works against it (``OpenAI(base_url=".../v1", api_key="x").embeddings.create``);
it asks for base64 unless told otherwise, which is the vectors' little-endian float32 bytes. Errors keep the
service's body ``{"error": {"type", "message"}}``, which the client reads as it reads OpenAI's.
"""

from __future__ import annotations

import base64
import functools

import numpy as np
from fastapi import APIRouter, Request, Response

from service.api.deps import RegistryDep, SettingsDep
from service.api.http import TASK_ERROR_RESPONSES, client_gone, json_response
from service.inference import InferenceRequest, run_inference
from service.schemas import EmbeddingsRequest, EmbeddingsResponse
from service.tasks import Embedding

router = APIRouter(tags=["openai"])


def encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    """float: a JSON list; base64: the float32 little-endian bytes (what OpenAI clients decode with frombuffer)."""
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector.tolist()


@router.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=TASK_ERROR_RESPONSES)
async def embeddings(
    body: EmbeddingsRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Embed texts with a feature-extraction model (OpenAI's embeddings API). Long texts are truncated to the
    model's max length (OpenAI refuses them instead); `usage` counts the tokens the model read."""
    inputs, params = body.to_task()
    inference = InferenceRequest(task=body.task, inputs=inputs, params=params, model=body.model)
    result = await run_inference(inference, registry, settings, functools.partial(client_gone, request))
    vectors: list[Embedding] = result.results
    tokens = sum(item.tokens for item in vectors)
    data = [
        {"object": "embedding", "index": index, "embedding": encode_vector(item.vector, body.encoding_format)}
        for index, item in enumerate(vectors)
    ]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return json_response({"object": "list", "data": data, "model": result.model, "usage": usage})
