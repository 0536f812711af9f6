"""Cohere's classify body for a fine-tuned text-classification model (``cohere.Client.classify``, ``POST
/v1/classify``), as the task's ``ClassificationParams``: every label scored, the model's own score function
(softmax: single-label; sigmoid, a multi-label model's: multi-label); ``service.api.cohere`` answers it. Few-shot
``examples`` and ``preset`` are Cohere's own models' and are refused."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

from service.schemas.common import TaskRequest, examples
from service.tasks.text_classification import ClassificationParams


class CohereClassifyRequest(TaskRequest):
    model_config = examples(
        {"model": "sst2", "inputs": ["A wonderful, moving film.", "Dull and far too long."]},
        {"model": "sst2", "inputs": ["A review that goes on and on ..."], "truncate": "START"},
    )
    task: ClassVar[str] = "text-classification"

    inputs: Annotated[list[str], Field(min_length=1)] = Field(description="The texts to classify.")
    examples: list[dict[str, Any]] | None = Field(
        None, description="Not taken: the model's own labels classify (a fine-tuned model's, as on Cohere)."
    )
    preset: str | None = Field(None, description="Not taken.")
    truncate: Literal["NONE", "START", "END"] = Field(
        "END", description="A text longer than the model's max length: cut at its END or START, or NONE: a 400."
    )

    @field_validator("examples")
    @classmethod
    def _no_examples(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value:
            raise ValueError(
                "examples are not taken: the model's own labels classify (fine-tune one on labelled texts with "
                "python -m training finetune)"
            )
        return value

    @field_validator("preset")
    @classmethod
    def _no_preset(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("preset is not taken: name the model")
        return value

    def input_list(self) -> list[str]:
        return self.inputs

    def to_task(self) -> tuple[list[Any], ClassificationParams]:
        direction = "left" if self.truncate == "START" else "right"
        params = ClassificationParams(
            top_k=None, function_to_apply=None, truncation=self.truncate != "NONE", truncation_direction=direction
        )
        return list(self.inputs), params


class CohereLabelConfidence(BaseModel):
    confidence: float


class CohereClassification(BaseModel):
    id: str
    input: str
    prediction: str | None = Field(None, description="The best label (single-label only).")
    predictions: list[str] = Field(description="Single-label: the best label; multi-label: each over 0.5, best first.")
    confidence: float | None = Field(None, description="The best label's score (single-label only).")
    confidences: list[float] = Field(description="The scores of predictions, in their order.")
    labels: dict[str, CohereLabelConfidence] = Field(description="Every label's score.")
    classification_type: Literal["single-label", "multi-label"]


class CohereClassifyResponse(BaseModel):
    model_config = examples(
        {"id": "9c1e", "classifications": [{
            "id": "5b7a", "input": "A wonderful, moving film.", "prediction": "positive", "predictions": ["positive"],
            "confidence": 0.98, "confidences": [0.98],
            "labels": {"positive": {"confidence": 0.98}, "negative": {"confidence": 0.02}},
            "classification_type": "single-label"}],
         "meta": {"api_version": {"version": "1"}, "billed_units": {"classifications": 1}}},
    )  # fmt: skip

    id: str
    classifications: list[CohereClassification] = Field(description="One per input, in input order.")
    meta: dict[str, dict[str, Any]]
