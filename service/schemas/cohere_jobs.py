"""Cohere's datasets and embed jobs as ``cohere.Client`` sends and reads them (``co.datasets.create / get / list /
delete / get_usage``, ``co.embed_jobs.create / get / list / cancel``, ``co.wait``, ``co.utils.save_dataset``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from service.schemas.common import examples
from service.tasks.feature_extraction_cohere import COHERE_EMBEDDING_TYPES, COHERE_INPUT_TYPES


class DatasetPart(BaseModel):
    id: str
    name: str
    url: str | None = Field(None, description="A signed download URL of the part (Avro), valid for 24 hours.")
    index: int
    size_bytes: int
    num_rows: int
    samples: list[str] = Field(description="The first rows, each as JSON.")


class Dataset(BaseModel):
    id: str
    name: str
    created_at: str
    updated_at: str
    dataset_type: str = Field(description="embed-input (uploaded) or embed-result (an embed job's output).")
    validation_status: Literal["validated", "failed"]
    validation_error: str | None = None
    schema_: str = Field(alias="schema", description="The parts' Avro schema, as JSON.")
    required_fields: list[str]
    preserve_fields: list[str]
    dataset_parts: list[DatasetPart]
    validation_warnings: list[str] = Field(description="Rows dropped (skip_malformed_input) or not embedded.")


class DatasetCreated(BaseModel):
    model_config = examples({"id": "reviews-4f1c2a9b0d3e"})

    id: str


class DatasetGot(BaseModel):
    dataset: Dataset


class DatasetList(BaseModel):
    datasets: list[Dataset]


class DatasetUsage(BaseModel):
    organization_usage: int = Field(description="Bytes this key's datasets take.")


class EmbedJobCreateRequest(BaseModel):
    model_config = examples(
        {"model": "minilm", "dataset_id": "reviews-4f1c2a9b0d3e", "input_type": "search_document"},
        {"model": "minilm", "dataset_id": "reviews-4f1c2a9b0d3e", "input_type": "clustering",
         "embedding_types": ["float", "ubinary"], "truncate": "START", "name": "nightly"},
    )  # fmt: skip

    model: str = Field(min_length=1, description="A served embedding model.")
    dataset_id: str = Field(description="A validated embed-input dataset of this key's.")
    input_type: COHERE_INPUT_TYPES = Field(description="As in /v1/embed: the prompt the texts get.")
    name: str | None = Field(None, description="The job's name; its output dataset is called NAME-output.")
    embedding_types: Annotated[list[COHERE_EMBEDDING_TYPES], Field(min_length=1)] | None = Field(
        None, description="As in /v1/embed; left out: float."
    )
    truncate: Literal["START", "END"] = Field("END", description="A text past the model's max length: cut there.")


class EmbedJobCreated(BaseModel):
    job_id: str
    meta: dict[str, Any]


class EmbedJob(BaseModel):
    job_id: str
    name: str | None = None
    status: Literal["processing", "complete", "cancelling", "cancelled", "failed"]
    created_at: str
    input_dataset_id: str
    output_dataset_id: str | None = Field(None, description="The embed-result dataset, once complete.")
    model: str
    truncate: Literal["START", "END"]
    meta: dict[str, Any]


class EmbedJobList(BaseModel):
    embed_jobs: list[EmbedJob]
