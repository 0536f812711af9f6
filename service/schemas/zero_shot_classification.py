from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field

from service.schemas.common import TaskRequest, examples
from service.tasks import ZeroShotParams
from service.tasks.zero_shot_classification import DEFAULTS, MAX_CANDIDATE_LABELS


class ZeroShotClassificationRequest(TaskRequest):
    model_config = examples(
        {"inputs": "The team won the match in extra time.", "candidate_labels": ["sports", "politics"]},
        {
            "model": "nli",
            "inputs": ["I need to fix my phone today!", "Lovely weather for a walk."],
            "candidate_labels": "urgent, phone, weather",
            "hypothesis_template": "This text is about {}.",
            "multi_label": True,
        },
    )
    task: ClassVar[str] = "zero-shot-classification"

    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(description="A text or a list of texts.")
    candidate_labels: str | Annotated[list[str], Field(min_length=1, max_length=MAX_CANDIDATE_LABELS)] = Field(
        description="The labels to choose from: a list, or one string of comma-separated labels."
    )
    hypothesis_template: str = Field(
        DEFAULTS["hypothesis_template"],
        description="The hypothesis each label is put into, at its {} (plain {} fields only).",
    )
    multi_label: bool = Field(
        DEFAULTS["multi_label"],
        description="Score each label on its own (entailment vs contradiction) instead of softmax over the labels.",
    )

    def input_list(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], ZeroShotParams]:
        labels = self.candidate_labels if isinstance(self.candidate_labels, str) else tuple(self.candidate_labels)
        params = ZeroShotParams(
            candidate_labels=labels, hypothesis_template=self.hypothesis_template, multi_label=self.multi_label
        )
        return list(self.input_list()), params


class ZeroShotResult(BaseModel):
    sequence: str = Field(description="The input text.")
    labels: list[str] = Field(description="The candidate labels, most likely first.")
    scores: list[float] = Field(description="Each label's score, in the order of labels.")


class ZeroShotClassificationResponse(BaseModel):
    model_config = examples(
        {
            "model": "nli",
            "results": [
                {
                    "sequence": "The team won the match in extra time.",
                    "labels": ["sports", "politics"],
                    "scores": [0.97, 0.03],
                }
            ],
        },
    )

    model: str
    results: list[ZeroShotResult] = Field(description="Per input (always a list), its labels by score, best first.")
