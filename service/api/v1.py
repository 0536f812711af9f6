"""The v1 task routes: a task's request model in, ``{"model", "results"}`` out (one result per input)."""

from __future__ import annotations

from service.api.protocol import Decoded, InferenceRoute, Protocol, Reply, json_reply
from service.core import InferenceResult
from service.schemas import (
    FillMaskRequest,
    FillMaskResponse,
    QuestionAnsweringRequest,
    QuestionAnsweringResponse,
    TextClassificationRequest,
    TextClassificationResponse,
    TokenClassificationRequest,
    TokenClassificationResponse,
    ZeroShotClassificationRequest,
    ZeroShotClassificationResponse,
)
from service.schemas.sentence_similarity import (
    SentenceSimilarityRequest,
    SentenceSimilarityResponse,
    SimilarityRequest,
)


def task_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    return json_reply({"model": result.model, "results": result.results})


def similarity_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    assert isinstance(decoded.request, SimilarityRequest)
    return json_reply({"model": result.model, "results": decoded.request.similarities(result.results)})


PROTOCOL = Protocol(
    "v1",
    (
        InferenceRoute(
            "/v1/text-classification",
            "text_classification",
            "Label texts or text pairs (transformers' text-classification pipeline semantics).",
            "text-classification",
            TextClassificationResponse,
            task_answer,
            body=TextClassificationRequest,
        ),
        InferenceRoute(
            "/v1/question-answering",
            "question_answering",
            "Extract answer spans from contexts (transformers' question-answering pipeline semantics).",
            "question-answering",
            QuestionAnsweringResponse,
            task_answer,
            body=QuestionAnsweringRequest,
        ),
        InferenceRoute(
            "/v1/token-classification",
            "token_classification",
            "Find entities in texts (transformers' token-classification pipeline semantics).",
            "token-classification",
            TokenClassificationResponse,
            task_answer,
            body=TokenClassificationRequest,
        ),
        InferenceRoute(
            "/v1/fill-mask",
            "fill_mask",
            "Predict the tokens behind mask tokens (transformers' fill-mask pipeline semantics).",
            "fill-mask",
            FillMaskResponse,
            task_answer,
            body=FillMaskRequest,
        ),
        InferenceRoute(
            "/v1/zero-shot-classification",
            "zero_shot_classification",
            "Score texts against labels chosen per request with an NLI model (transformers' zero-shot pipeline).",
            "zero-shot-classification",
            ZeroShotClassificationResponse,
            task_answer,
            body=ZeroShotClassificationRequest,
        ),
        InferenceRoute(
            "/v1/sentence-similarity",
            "sentence_similarity",
            "The cosine of a source sentence with each of a list, with an embeddings model (sentence-transformers'\n"
            "`similarity`).",
            "sentence-similarity",
            SentenceSimilarityResponse,
            similarity_answer,
            body=SentenceSimilarityRequest,
        ),
    ),
)
