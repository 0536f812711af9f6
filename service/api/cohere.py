"""Cohere's routes, as ``cohere.Client`` / ``cohere.ClientV2`` (``base_url=...``) post them: rerank v2 (``POST
/v2/rerank``), embed v1 and v2 (``/v1/embed``, ``/v2/embed``), classify (``/v1/classify``), tokenize and detokenize
(``/v1/tokenize``, ``/v1/detokenize``).

Rerank v2 is ``/v1/rerank``'s ranking (Cohere's v1 shape, ``service.api.rerank``) in v2's answer: ``id`` and
``results`` of ``index`` and ``relevance_score``, no documents. Embed answers one vector per text in each type asked
for: float, base64 (float32 little-endian bytes), binary and ubinary (the signs packed 8 a byte) and int8 / uint8
(buckets of the model's calibrated ranges), as sentence-transformers' ``quantize_embeddings``; v1 without
``embedding_types`` answers ``embeddings_floats``. Classify scores every label with the model's own score function
(softmax: single-label; sigmoid: multi-label). These sit beside the Open Inference Protocol's ``/v2/models/...`` and
``/v2/health/...`` routes, whose paths they do not share.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter
from tokenizers import Encoding

from service.api.bodies import validated_json_body
from service.api.deps import RegistryDep
from service.api.entry import Decoded, Decoder, Incoming, InferenceRoute, Protocol, Reply, json_reply
from service.api.error_docs import error_responses
from service.api.openai import encode_vector
from service.core import InferenceResult, ModelRegistry
from service.errors import BadRequest, InvalidRequest, ModelNotFound, PayloadTooLarge, UnsupportedMediaType
from service.schemas.cohere import (
    COHERE_META,
    CohereDetokenizeRequest,
    CohereDetokenizeResponse,
    CohereTokenizeRequest,
    CohereTokenizeResponse,
)
from service.tasks import Embedding
from service.tasks.feature_extraction_cohere import CohereEmbedRequest, CohereEmbedResponse, CohereV2EmbedRequest
from service.tasks.rerank import CohereV2RerankRequest, CohereV2RerankResponse, RelevanceScore, rank
from service.tasks.text_classification import default_function
from service.tasks.text_classification_cohere import CohereClassifyRequest, CohereClassifyResponse


def rerank_v2_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, CohereV2RerankRequest)
    scores: list[RelevanceScore] = result.results
    ranked = [
        {"index": index, "relevance_score": scores[index].score}
        for index in rank([item.score for item in scores], request.top_n)
    ]
    return json_reply({"id": uuid.uuid4().hex, "results": ranked})


def embed_decoder(body: type[CohereEmbedRequest]) -> Decoder:
    """The body as ``body``; for int8 or uint8, with the model and its quantization ranges (bundle.json's
    embedding_ranges, cut to the dimensions answered)."""

    def decode(incoming: Incoming, registry: ModelRegistry) -> Decoded:
        request = validated_json_body(body, incoming.body, incoming.content_type)
        if not {"int8", "uint8"} & set(request.embedding_types or ()):
            return Decoded(request)
        engine = registry.select(request.task, request.model)
        ranges = engine.context.embedding_ranges
        if ranges is None:
            raise BadRequest(
                f"model {engine.name!r} has no int8 / uint8 quantization ranges: export it with "
                "--embedding-calibration FILE (texts like those to be embedded), or ask for float, base64, binary or "
                "ubinary"
            )
        dimensions = getattr(request, "output_dimension", None) or ranges.shape[1]
        if dimensions < ranges.shape[1] and engine.context.embedding_normalized:
            raise BadRequest(
                "int8 / uint8 with output_dimension: the cut vectors are normalised again, which the model's ranges "
                "(taken at its full dimension) do not describe; ask for the full dimension, or for float, binary or "
                "ubinary"
            )
        return Decoded(request, engine, context=ranges[:, :dimensions])

    return decode


def quantized(vectors: np.ndarray, ranges: np.ndarray, signed: bool) -> np.ndarray:
    """sentence-transformers' ``quantize_embeddings`` int8 / uint8 with fixed ``ranges`` ((2, dimensions))."""
    steps = (ranges[1] - ranges[0]) / 255
    steps = np.where(steps == 0, 1, steps)
    buckets = np.clip(np.floor((vectors - ranges[0]) / steps), 0, 255)
    return (buckets - 128).astype(np.int8) if signed else buckets.astype(np.uint8)


def embeddings_by_type(vectors: list[np.ndarray], types: Sequence[str], ranges: np.ndarray | None) -> dict[str, Any]:
    """Each type asked for, one entry per vector."""
    answer: dict[str, Any] = {}
    for kind in types:
        if kind == "float":
            answer[kind] = vectors
        elif kind == "base64":
            answer[kind] = [encode_vector(vector, "base64") for vector in vectors]
        elif kind in ("binary", "ubinary"):
            signs = np.packbits(np.stack(vectors) > 0, axis=-1)  # (texts, ceil(dimensions / 8)) uint8
            answer[kind] = list(signs) if kind == "ubinary" else list(signs.astype(np.int16) - 128)
        else:  # int8, uint8: the decoder found the model's ranges
            assert ranges is not None
            answer[kind] = list(quantized(np.stack(vectors), ranges, signed=kind == "int8"))
    return answer


def embed_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, CohereEmbedRequest)
    embedded: list[Embedding] = result.results
    vectors = [item.vector for item in embedded]
    version = "2" if isinstance(request, CohereV2EmbedRequest) else "1"
    meta = {"api_version": {"version": version}, "billed_units": {"input_tokens": sum(i.tokens for i in embedded)}}
    answer: dict[str, Any] = {"id": uuid.uuid4().hex}
    if version == "1" and request.embedding_types is None:
        answer |= {"response_type": "embeddings_floats", "embeddings": vectors}
    else:
        by_type = embeddings_by_type(vectors, request.embedding_types or ["float"], decoded.context)
        answer |= {"response_type": "embeddings_by_type", "embeddings": by_type}
    return json_reply(answer | {"texts": request.texts, "meta": meta})


def classify_decode(incoming: Incoming, registry: ModelRegistry) -> Decoded:
    """The body, and the model's score function: the answer's classification type (sigmoid: multi-label)."""
    request = validated_json_body(CohereClassifyRequest, incoming.body, incoming.content_type)
    engine = registry.select(request.task, request.model)
    function = default_function(engine.context)
    if function == "none":
        raise BadRequest(f"model {engine.name!r} is a regression model: classify needs labels")
    return Decoded(request, engine, context=function)


def classify_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    request = decoded.request
    assert isinstance(request, CohereClassifyRequest)
    multi = decoded.context == "sigmoid"
    classifications = []
    for text, ranked in zip(request.inputs, result.results, strict=True):  # each: every label, best first
        chosen = [item for item in ranked if item["score"] > 0.5] if multi else ranked[:1]
        entry = {
            "id": uuid.uuid4().hex,
            "input": text,
            "predictions": [item["label"] for item in chosen],
            "confidences": [item["score"] for item in chosen],
            "labels": {item["label"]: {"confidence": item["score"]} for item in ranked},
            "classification_type": "multi-label" if multi else "single-label",
        }
        if not multi:
            entry |= {"prediction": ranked[0]["label"], "confidence": ranked[0]["score"]}
        classifications.append(entry)
    meta = {"api_version": {"version": "1"}, "billed_units": {"classifications": len(classifications)}}
    return json_reply({"id": uuid.uuid4().hex, "classifications": classifications, "meta": meta})


router = APIRouter(tags=["cohere"])
TOKENIZER_ERRORS = error_responses(BadRequest, ModelNotFound, PayloadTooLarge, UnsupportedMediaType, InvalidRequest)


@router.post("/v1/tokenize", response_model=CohereTokenizeResponse, responses=TOKENIZER_ERRORS)
async def cohere_tokenize(body: CohereTokenizeRequest, registry: RegistryDep) -> CohereTokenizeResponse:
    """The text's tokens by the model's tokenizer (Cohere's tokenize): ids and the text each covers."""

    def shaped(encodings: list[Encoding]) -> CohereTokenizeResponse:
        [encoding] = encodings
        strings = [body.text[start:stop] for start, stop in encoding.offsets]
        return CohereTokenizeResponse(tokens=encoding.ids, token_strings=strings, meta=COHERE_META)

    return await registry.select(None, body.model, "name one with model").tokenize([body.text], False, shaped)


@router.post("/v1/detokenize", response_model=CohereDetokenizeResponse, responses=TOKENIZER_ERRORS)
async def cohere_detokenize(body: CohereDetokenizeRequest, registry: RegistryDep) -> CohereDetokenizeResponse:
    """The text of token ids by the model's tokenizer (Cohere's detokenize), special tokens left out."""
    [text] = await registry.select(None, body.model, "name one with model").decode([body.tokens])
    return CohereDetokenizeResponse(text=text, meta=COHERE_META)


EMBED = "Embed texts with a feature-extraction model ({}). input_type picks the model's prompt for it."

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
        InferenceRoute(
            "/v1/embed",
            "embed_v1",
            EMBED.format("Cohere's v1 embed shape"),
            "cohere",
            CohereEmbedResponse,
            embed_answer,
            body=CohereEmbedRequest,
            decode=embed_decoder(CohereEmbedRequest),
        ),
        InferenceRoute(
            "/v2/embed",
            "embed_v2",
            EMBED.format("Cohere's v2 embed shape: an output dimension and a token cap too"),
            "cohere",
            CohereEmbedResponse,
            embed_answer,
            body=CohereV2EmbedRequest,
            decode=embed_decoder(CohereV2EmbedRequest),
        ),
        InferenceRoute(
            "/v1/classify",
            "classify",
            "Label texts with a fine-tuned text-classification model (Cohere's classify shape): every label's score;\n"
            "single-label for a softmax model, multi-label (each label over 0.5) for a multi-label one.",
            "cohere",
            CohereClassifyResponse,
            classify_answer,
            body=CohereClassifyRequest,
            decode=classify_decode,
        ),
    ),
    router,
)
