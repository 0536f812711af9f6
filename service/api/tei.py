"""text-embeddings-inference-compatible routes: ``POST /embed``.

TEI's semantics: ``normalize`` defaults to true, ``truncate`` to false (a text longer than the model's max length
is a 400 naming its length). One addition: ``model`` names the model when several are loaded. TEI's ``/rerank``
is in ``service.api.rerank``, beside the other rerank shape.
"""

from __future__ import annotations

from service.api.protocol import Decoded, InferenceRoute, Protocol, Reply, json_reply
from service.inference import InferenceResult
from service.schemas import TeiEmbedRequest, TeiEmbedResponse


def embed_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    return json_reply([item.vector for item in result.results])


PROTOCOL = Protocol(
    "tei",
    (
        InferenceRoute(
            "/embed",
            "embed",
            "Embed texts with a feature-extraction model (text-embeddings-inference's `/embed`): one vector per text,\n"
            "a list of lists also for a single text.",
            "tei",
            TeiEmbedResponse,
            embed_answer,
            body=TeiEmbedRequest,
        ),
    ),
)
