"""The protocol adapters the service speaks, in the order their routes appear in the OpenAPI document."""

from __future__ import annotations

from service.api import cohere, hf, openai, rerank, tei, v1, v2
from service.api.protocol import InferenceRoute, Protocol

PROTOCOLS: tuple[Protocol, ...] = (
    v1.PROTOCOL, rerank.PROTOCOL, cohere.PROTOCOL, openai.PROTOCOL, tei.PROTOCOL, v2.PROTOCOL, hf.PROTOCOL,
)  # fmt: skip

INFERENCE_ROUTES: tuple[InferenceRoute, ...] = tuple(route for protocol in PROTOCOLS for route in protocol.routes)
