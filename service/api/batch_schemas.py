"""The Batch API's bodies, as OpenAI's API defines them (the ``openai`` client's ``FileObject``, ``Batch``, ...)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from service.schemas.common import SentInFull

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]


class FileObject(SentInFull):
    id: str
    object: Literal["file"]
    bytes: int = Field(description="Size of the file.")
    created_at: int = Field(description="Unix seconds.")
    filename: str
    purpose: Literal["batch", "batch_output"] = Field(
        description="batch: an uploaded input; batch_output: a batch's output or error file."
    )
    status: Literal["processed"]
    status_details: None
    expires_at: None


class FileList(SentInFull):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(SentInFull):
    id: str
    object: Literal["file"]
    deleted: bool


class BatchCreateRequest(BaseModel):
    """A batch of the requests in an uploaded file (purpose ``batch``), each line
    ``{"custom_id", "method": "POST", "url": ENDPOINT, "body"}``."""

    model_config = ConfigDict(extra="ignore")  # fields of OpenAI's API this service does not use

    input_file_id: str = Field(description="The uploaded file of requests (purpose batch).")
    endpoint: str = Field(
        description="The route every line is sent to: /v1/embeddings or a /v1 task route (/v1/text-classification).",
        examples=["/v1/embeddings"],
    )
    completion_window: Literal["24h"] = Field(description="The batch expires unfinished after this long.")
    metadata: dict[str, str] | None = Field(default=None, max_length=16, description="Up to 16 key-value pairs.")


class BatchRequestCounts(SentInFull):
    total: int
    completed: int = Field(description="Requests answered with a 200 (output file).")
    failed: int = Field(description="Requests answered with an error or not sent (error file).")


class BatchError(SentInFull):
    code: str
    message: str
    param: str | None
    line: int | None


class BatchErrors(SentInFull):
    object: Literal["list"]
    data: list[BatchError]


class BatchObject(SentInFull):
    id: str
    object: Literal["batch"]
    endpoint: str
    errors: BatchErrors | None = Field(description="Why the batch failed as a whole (its input could not be read).")
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: BatchRequestCounts
    metadata: dict[str, str] | None


class BatchList(SentInFull):
    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
