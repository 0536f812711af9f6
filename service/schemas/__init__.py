"""Request and response models of the HTTP API (they shape the OpenAPI schema and its clients).

A request turns into the engine's ``(inputs, params)`` with ``to_task()``. Every response carries
``results`` as a list with one entry per input, also when the request sent a single input.
"""

from service.schemas.common import ErrorDetail, ErrorResponse, HealthResponse, ModelCard, ModelsResponse, TaskRequest
from service.schemas.embeddings import (
    EmbeddingData,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbeddingsUsage,
    TeiEmbedRequest,
    TeiEmbedResponse,
)
from service.schemas.fill_mask import FillMaskPrediction, FillMaskRequest, FillMaskResponse
from service.schemas.question_answering import QAAnswer, QAPair, QuestionAnsweringRequest, QuestionAnsweringResponse
from service.schemas.rerank import (
    CohereV2RerankRequest,
    CohereV2RerankResponse,
    RerankDocument,
    RerankRequest,
    RerankResponse,
    RerankResult,
    TeiRank,
    TeiRerankRequest,
    TeiRerankResponse,
)
from service.schemas.text_classification import (
    LabelScore,
    TextClassificationRequest,
    TextClassificationResponse,
    TextPair,
)
from service.schemas.token_classification import Entity, TokenClassificationRequest, TokenClassificationResponse
from service.schemas.zero_shot_classification import (
    ZeroShotClassificationRequest,
    ZeroShotClassificationResponse,
    ZeroShotResult,
)

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
