from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.common import MAX_TOP_K, TaskRequest, examples
from service.tasks import ClassificationParams
from service.tasks.text_classification import DEFAULTS


class TextPair(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    text_pair: str


TextInput = str | TextPair


class TextClassificationRequest(TaskRequest):
    model_config = examples(
        {"inputs": "A wonderful, moving film."},
        {"model": "sst2", "inputs": ["Great acting.", "Dull and far too long."], "top_k": 2},
        {"inputs": {"text": "A man is eating.", "text_pair": "Someone eats food."}, "top_k": None},
        {"inputs": "A long review that goes on and on ...", "long_text": "chunk"},
    )
    task: ClassVar[str] = "text-classification"

    inputs: TextInput | Annotated[list[TextInput], Field(min_length=1)] = Field(
        description="A text, a {text, text_pair} pair, or a list of either."
    )
    top_k: int | None = Field(
        DEFAULTS["top_k"], ge=1, le=MAX_TOP_K, description="How many labels per input; null for all labels."
    )
    function_to_apply: Literal["softmax", "sigmoid", "none"] | None = Field(
        DEFAULTS["function_to_apply"],
        description="Score function; default as transformers picks it (softmax, or sigmoid for multi-label).",
    )

    truncation: bool = Field(
        False,
        description="Cut an input longer than the model's max length to fit (as transformers' truncation=True); "
        "without it (and without long_text) such an input is a 400 naming its length.",
    )
    long_text: Literal["chunk"] | None = Field(
        None,
        description='"chunk": classify an input longer than the model\'s max length in windows of max length tokens, '
        "their logits averaged (weighted by window length); excludes truncation.",
    )

    def input_list(self) -> list[TextInput]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], ClassificationParams]:
        inputs = [item if isinstance(item, str) else (item.text, item.text_pair) for item in self.input_list()]
        params = ClassificationParams(
            top_k=self.top_k,
            function_to_apply=self.function_to_apply,
            truncation=self.truncation,
            long_text=self.long_text,
        )
        return inputs, params


class LabelScore(BaseModel):
    label: str
    score: float


class TextClassificationResponse(BaseModel):
    model_config = examples({"model": "sst2", "results": [[{"label": "positive", "score": 0.998}]]})

    model: str
    results: list[list[LabelScore]] = Field(description="Per input (always a list), labels by score, best first.")
