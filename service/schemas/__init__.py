"""Request and response models of the HTTP API (they shape the OpenAPI schema and its clients).

A request turns into the engine's ``(inputs, params)`` with ``to_task()``. Every response carries
``results`` as a list with one entry per input, also when the request sent a single input.
"""

from service.schemas.common import ErrorDetail, ErrorResponse, HealthResponse, ModelCard, ModelsResponse, TaskRequest
from service.schemas.fill_mask import FillMaskPrediction, FillMaskRequest, FillMaskResponse
from service.schemas.question_answering import QAAnswer, QAPair, QuestionAnsweringRequest, QuestionAnsweringResponse
from service.schemas.text_classification import (
    LabelScore,
    TextClassificationRequest,
    TextClassificationResponse,
    TextPair,
)
from service.schemas.token_classification import Entity, TokenClassificationRequest, TokenClassificationResponse

__all__ = [
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
    "TaskRequest",
    "TextClassificationRequest",
    "TextClassificationResponse",
    "TextPair",
    "TokenClassificationRequest",
    "TokenClassificationResponse",
]
