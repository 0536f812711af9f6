"""The tasks, one module each: a module holds everything its task is (request and answer schemas, limits, prepare
and postprocess, protocol mappings) and declares it as its ``UNIT``; the engine, the settings and the protocols
iterate ``UNITS``. To add a task: write its module here, add its defaults to ``contract.tasks``, list it below.
"""

from __future__ import annotations

from service.oip.layouts import TaskLayout
from service.tasks import (
    feature_extraction,
    fill_mask,
    question_answering,
    rerank,
    sentence_similarity,
    text_classification,
    token_classification,
    zero_shot_classification,
)
from service.tasks.base import HfMapping, InputError, ModelContext, ModelRow, Prepared, TaskHandler, TaskUnit
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

# In the order of their v1 routes in the OpenAPI document.
UNITS: tuple[TaskUnit, ...] = (
    text_classification.UNIT,
    question_answering.UNIT,
    token_classification.UNIT,
    fill_mask.UNIT,
    zero_shot_classification.UNIT,
    sentence_similarity.UNIT,
    feature_extraction.UNIT,
    rerank.UNIT,
)
BY_TASK: dict[str, TaskUnit] = {unit.name: unit for unit in UNITS}
# The HF Inference API's mappings by the task of the models that answer them, those that choose their bodies first.
HF_MAPPINGS: dict[str, list[HfMapping]] = {}
for _unit in sorted(UNITS, key=lambda unit: unit.hf is None or unit.hf.accepts is None):
    if _unit.hf is not None:
        HF_MAPPINGS.setdefault(_unit.hf.serves or _unit.name, []).append(_unit.hf)
LAYOUTS: dict[str, TaskLayout] = {unit.name: unit.oip for unit in UNITS if unit.oip is not None}
HANDLERS: dict[str, TaskHandler] = {unit.name: unit.handler for unit in UNITS if unit.handler is not None}


def unit_of(task: str) -> TaskUnit:
    """The unit of a served task (a bundle's task with a handler); KeyError if none."""
    return BY_TASK[task]


__all__ = [
    "BY_TASK",
    "HANDLERS",
    "HF_MAPPINGS",
    "LAYOUTS",
    "UNITS",
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
    "TaskUnit",
    "TextClassificationHandler",
    "TokenClassificationHandler",
    "TokenClassificationParams",
    "TokenEmbeddingParams",
    "TokenEmbeddings",
    "WordsInput",
    "ZeroShotClassificationHandler",
    "ZeroShotParams",
    "unit_of",
]
