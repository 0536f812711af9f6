"""The four task handlers, keyed by task name. Import-light: tokenizers + numpy only."""

from __future__ import annotations

from service.tasks.base import InputError, ModelContext, ModelRow, Prepared, TaskHandler
from service.tasks.fill_mask import FillMaskHandler, FillMaskParams
from service.tasks.question_answering import QAInput, QAParams, QuestionAnsweringHandler
from service.tasks.text_classification import ClassificationInput, ClassificationParams, TextClassificationHandler
from service.tasks.token_classification import TokenClassificationHandler, TokenClassificationParams, WordsInput

HANDLERS: dict[str, TaskHandler] = {
    "text-classification": TextClassificationHandler(),
    "question-answering": QuestionAnsweringHandler(),
    "token-classification": TokenClassificationHandler(),
    "fill-mask": FillMaskHandler(),
}

__all__ = [
    "HANDLERS",
    "ClassificationInput",
    "ClassificationParams",
    "FillMaskHandler",
    "FillMaskParams",
    "InputError",
    "ModelContext",
    "ModelRow",
    "Prepared",
    "QAInput",
    "QAParams",
    "QuestionAnsweringHandler",
    "TaskHandler",
    "TextClassificationHandler",
    "TokenClassificationHandler",
    "TokenClassificationParams",
    "WordsInput",
]
