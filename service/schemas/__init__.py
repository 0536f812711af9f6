"""Request and response models of the HTTP API (they shape the OpenAPI schema and its clients).

A request turns into the engine's ``(inputs, params)`` with ``to_task()``. Every response carries
``results`` as a list with one entry per input, also when the request sent a single input.
"""

from service.schemas.common import ErrorDetail, ErrorResponse, HealthResponse, ModelCard, ModelsResponse, TaskRequest

__all__ = [
    "CohereV2RerankRequest",
    "CohereV2RerankResponse",
    "EmbeddingData",
    "EmbeddingsRequest",
    "EmbeddingsResponse",
    "EmbeddingsUsage",
    "Entity",
    "ErrorDetail",
    "ErrorResponse",
    "FillMaskPrediction",
    "FillMaskRequest",
    "FillMaskResponse",
    "HealthResponse",
    "LabelScore",
    "ModelCard",
    "ModelsResponse",
    "QAAnswer",
    "QAPair",
    "QuestionAnsweringRequest",
    "QuestionAnsweringResponse",
    "RerankDocument",
    "RerankRequest",
    "RerankResponse",
    "RerankResult",
    "TaskRequest",
    "TeiEmbedRequest",
    "TeiEmbedResponse",
    "TeiRank",
    "TeiRerankRequest",
    "TeiRerankResponse",
    "TextClassificationRequest",
    "TextClassificationResponse",
    "TextPair",
    "TokenClassificationRequest",
    "TokenClassificationResponse",
    "ZeroShotClassificationRequest",
    "ZeroShotClassificationResponse",
    "ZeroShotResult",
]
