from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.common import MAX_TOKENS, TaskRequest
from service.tasks import TokenClassificationParams


class TokenClassificationRequest(TaskRequest):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"inputs": "John Smith works for Google in London."},
                {"model": "conll", "inputs": ["Mary lives in Paris."], "aggregation_strategy": "none"},
            ]
        },
    )
    task: ClassVar[str] = "token-classification"

    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(description="A text or a list of texts.")
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = Field(
        "simple", description="How sub-word predictions merge into entities (as in transformers' pipeline)."
    )
    ignore_labels: list[str] = Field(default_factory=lambda: ["O"], description="Labels left out of the results.")
    stride: int | None = Field(
        None,
        ge=0,
        le=MAX_TOKENS,
        description="Overlap of windows over long texts; default max length // 4.",
    )

    def input_list(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], TokenClassificationParams]:
        params = TokenClassificationParams(
            aggregation_strategy=self.aggregation_strategy,
            ignore_labels=tuple(self.ignore_labels),
            stride=self.stride,
        )
        return list(self.input_list()), params


class Entity(BaseModel):
    entity_group: str | None = Field(None, description="Entity type, when aggregated.")
    entity: str | None = Field(None, description="Token label, when aggregation_strategy is none.")
    index: int | None = Field(None, description="Token index, when aggregation_strategy is none.")
    score: float
    word: str
    start: int | None
    end: int | None


class TokenClassificationResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "model": "conll",
                    "results": [
                        [
                            {"entity_group": "PER", "score": 0.99, "word": "john smith", "start": 0, "end": 10},
                            {"entity_group": "ORG", "score": 0.98, "word": "google", "start": 21, "end": 27},
                        ]
                    ],
                }
            ]
        }
    )

    model: str
    results: list[list[Entity]] = Field(description="Per input (always a list), its entities in text order.")
