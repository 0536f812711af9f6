"""OpenAI-compatible routes: ``POST /v1/embeddings``.

The official ``openai`` client works against it (``OpenAI(base_url=".../v1", api_key="x").embeddings.create``);
it asks for base64 unless told otherwise, which is the vectors' little-endian float32 bytes. Errors keep the
service's body ``{"error": {"type", "message"}}``, which the client reads as it reads OpenAI's.
"""

from __future__ import annotations

import base64

import numpy as np

from service.api.entry import Decoded, InferenceRoute, Protocol, Reply, json_reply
from service.core import InferenceResult
from service.tasks import Embedding
from service.tasks.feature_extraction import EmbeddingsRequest, EmbeddingsResponse


def encode_vector(vector: np.ndarray, encoding_format: str) -> np.ndarray | str:
    """float: the vector, which the answer's JSON writes as a list; base64: the float32 little-endian bytes (what
    OpenAI clients decode with frombuffer)."""
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


def embeddings_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, EmbeddingsRequest)
    vectors: list[Embedding] = result.results
    tokens = sum(item.tokens for item in vectors)
    data = [
        {"object": "embedding", "index": index, "embedding": encode_vector(item.vector, request.encoding_format)}
        for index, item in enumerate(vectors)
    ]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return json_reply({"object": "list", "data": data, "model": result.model, "usage": usage})


PROTOCOL = Protocol(
    "openai",
    (
        InferenceRoute(
            "/v1/embeddings",
            "embeddings",
            "Embed texts with a feature-extraction model (OpenAI's embeddings API). Long texts are truncated to the\n"
            "model's max length (OpenAI refuses them instead); `usage` counts the tokens the model read.",
            "openai",
            EmbeddingsResponse,
            embeddings_answer,
            body=EmbeddingsRequest,
        ),
    ),
)
