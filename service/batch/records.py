"""A stored file and a stored batch, as the database holds them and as the OpenAI API shows them (``as_object``).

Status names, timestamps (Unix seconds) and ``request_counts`` are OpenAI's; the owner is a hash of the API key that
made the object (empty with no keys), never the key.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

VALIDATING, IN_PROGRESS, FINALIZING, COMPLETED = "validating", "in_progress", "finalizing", "completed"
FAILED, EXPIRED, CANCELLING, CANCELLED = "failed", "expired", "cancelling", "cancelled"
UNFINISHED = (VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING)  # a runner still owes these work
FINISHED = (COMPLETED, FAILED, EXPIRED, CANCELLED)
TIMESTAMPS = {  # the status -> the field stamped when a batch enters it
    IN_PROGRESS: "in_progress_at",
    FINALIZING: "finalizing_at",
    COMPLETED: "completed_at",
    FAILED: "failed_at",
    EXPIRED: "expired_at",
    CANCELLING: "cancelling_at",
    CANCELLED: "cancelled_at",
}
COMPLETION_WINDOWS = {"24h": 24 * 3600}
INPUT_PURPOSE, OUTPUT_PURPOSE = "batch", "batch_output"
OPENAI = "openai"  # a batch's origin: the OpenAI Batch API's own (else another API's job, run as a batch)


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    owner: str
    filename: str
    purpose: str
    bytes: int
    lines: int
    created_at: int

    @classmethod
    def of(cls, row: sqlite3.Row) -> FileRecord:
        return cls(*(row[name] for name in cls.__slots__))

    def as_object(self) -> dict[str, Any]:
        """OpenAI's File object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


@dataclass(frozen=True, slots=True)
class BatchRecord:
    id: str
    owner: str
    endpoint: str
    input_file_id: str
    completion_window: str
    metadata: str | None  # JSON
    status: str
    errors: str | None  # JSON list of {code, message, line, param}
    created_at: int
    in_progress_at: int | None
    expires_at: int
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    total: int
    completed: int
    failed: int
    done_lines: int  # input lines answered, committed with their entries
    output_bytes: int  # committed size of the output work file
    error_bytes: int  # committed size of the error work file
    work_output_id: str  # the file ids the work files get when the batch finishes
    work_error_id: str
    output_file_id: str | None
    error_file_id: str | None
    origin: str  # OPENAI, or the API whose job this batch runs

    @classmethod
    def of(cls, row: sqlite3.Row) -> BatchRecord:
        return cls(*(row[name] for name in cls.__slots__))

    def as_object(self) -> dict[str, Any]:
        """OpenAI's Batch object."""
        errors = None if self.errors is None else {"object": "list", "data": json.loads(self.errors)}
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": self.expires_at,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "metadata": None if self.metadata is None else json.loads(self.metadata),
        }
