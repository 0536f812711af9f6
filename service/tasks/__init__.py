"""The task handlers, keyed by task name. Import-light: tokenizers + numpy only."""

from __future__ import annotations

from service.tasks.base import InputError, ModelContext, ModelRow, Prepared, TaskHandler
from service.tasks.feature_extraction import (
    Embedding,
    EmbeddingParams,
    FeatureExtractionHandler,
    TokenEmbeddingParams,
    TokenEmbeddings,
)
from service.tasks.fill_mask import FillMaskHandler, FillMaskParams
from service.tasks.question_answering import QAInput, QAParams, QuestionAnsweringHandler
from service.tasks.rerank import RelevanceScore, RerankHandler, RerankParams
from service.tasks.sparse_embedding import SparseEmbedding, SparseEmbeddingParams
from service.tasks.text_classification import ClassificationInput, ClassificationParams, TextClassificationHandler
from service.tasks.token_classification import TokenClassificationHandler, TokenClassificationParams, WordsInput
from service.tasks.zero_shot_classification import ZeroShotClassificationHandler, ZeroShotParams

HANDLERS: dict[str, TaskHandler] = {
    "text-classification": TextClassificationHandler(),
    "question-answering": QuestionAnsweringHandler(),
    "token-classification": TokenClassificationHandler(),
    "fill-mask": FillMaskHandler(),
    "feature-extraction": FeatureExtractionHandler(),
    "rerank": RerankHandler(),
    "zero-shot-classification": ZeroShotClassificationHandler(),
}

__all__ = [
    "HANDLERS",
    "ClassificationInput",
    "ClassificationParams",
    "Embedding",
    "EmbeddingParams",
    "FeatureExtractionHandler",
    "FillMaskHandler",
    "FillMaskParams",
    "InputError",
    "ModelContext",
    "ModelRow",
    "Prepared",
    "QAInput",
    "QAParams",
    "QuestionAnsweringHandler",
    "RelevanceScore",
    "RerankHandler",
    "RerankParams",
    "SparseEmbedding",
    "SparseEmbeddingParams",
    "TaskHandler",
    "TextClassificationHandler",
    "TokenClassificationHandler",
    "TokenClassificationParams",
    "TokenEmbeddingParams",
    "TokenEmbeddings",
    "WordsInput",
    "ZeroShotClassificationHandler",
    "ZeroShotParams",
]
