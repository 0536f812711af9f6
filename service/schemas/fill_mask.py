from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field

from service.schemas.common import MAX_TOP_K, TaskRequest, examples
from service.tasks import FillMaskParams
from service.tasks.fill_mask import DEFAULTS


class FillMaskRequest(TaskRequest):
    model_config = examples(
        {"inputs": "Paris is the [MASK] of France."},
        {"model": "mlm", "inputs": ["The movie was [MASK]."], "top_k": 3, "targets": ["good", "bad"]},
    )
    task: ClassVar[str] = "fill-mask"

    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(
        description="A text with one or more mask tokens, or a list of them."
    )
    top_k: int = Field(DEFAULTS["top_k"], ge=1, le=MAX_TOP_K, description="Predictions per mask.")
    targets: Annotated[list[str], Field(min_length=1)] | None = Field(
        None, description="Only score these words (as transformers' targets)."
    )

    def input_list(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], FillMaskParams]:
        targets = tuple(self.targets) if self.targets is not None else None
        return list(self.input_list()), FillMaskParams(top_k=self.top_k, targets=targets)


class FillMaskPrediction(BaseModel):
    score: float
    token: int = Field(description="Vocabulary id of the predicted token.")
    token_str: str
    sequence: str = Field(description="The input with this token in the mask's place.")


class FillMaskResponse(BaseModel):
    model_config = examples(
        {
            "model": "mlm",
            "results": [
                [
                    [
                        {
                            "score": 0.41,
                            "token": 3007,
                            "token_str": "capital",
                            "sequence": "paris is the capital of france.",
                        }
                    ]
                ]
            ],
        },
    )

    model: str
    results: list[list[list[FillMaskPrediction]]] = Field(
        description="Per input (always a list), per mask position (always a list), predictions best first."
    )
