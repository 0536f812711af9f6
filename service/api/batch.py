"""The OpenAI Batch API over HTTP: ``/v1/files`` and ``/v1/batches``, served when ``data_dir`` is set (else each
answers 404 saying how to turn it on). The official ``openai`` client works unchanged (``files.create``,
``batches.create``, ``batches.retrieve``, ``batches.cancel``, ``batches.list``, ``files.content``, ...).

- An upload (``POST /v1/files``, multipart ``file`` + ``purpose=batch``) is read by ``UploadEntry``, a layer
  outside the request body reader: a batch file may be far larger than ``max_body_bytes`` (up to
  ``batch_max_file_bytes``), so it streams to disk instead of being held. The FastAPI route only documents it.
- With API keys on, each file and batch belongs to the key that made it (a SHA-256 of the key is stored, never the
  key): another key gets 404 for it and does not see it in lists.
- Nothing here logs a file's content.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.batch_lines import BATCH_ROUTES, RouteCall
from service.api.batch_schemas import BatchCreateRequest, BatchList, BatchObject, FileDeleted, FileList, FileObject
from service.api.entry import header, route_path, send_error, send_json
from service.api.error_docs import error_responses
from service.batch.cohere_jobs import COHERE_EMBED_JOB, CohereJobs
from service.batch.records import BatchRecord
from service.batch.runner import BatchRunner
from service.batch.store import BatchStore
from service.core import ServiceCore
from service.errors import (
    BadRequest,
    Conflict,
    InvalidRequest,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    ResourceNotFound,
    ServiceError,
    UnsupportedMediaType,
)
from service.settings import Settings

router = APIRouter(tags=["batch"])
FILES_PATH = "/v1/files"
CONTENT_TYPE = "application/octet-stream"  # a file's content, as OpenAI sends it
FORM_SLACK_BYTES = 64 << 10  # multipart framing and the purpose field, beyond the file itself
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "JSONL, one request a line."},
                        "purpose": {"type": "string", "enum": ["batch"]},
                    },
                }
            }
        },
    }
}


def open_batch_jobs(core: ServiceCore) -> tuple[BatchRunner, CohereJobs] | None:
    """The batch runner over ``core`` and the store in ``data_dir``, and Cohere's datasets and embed jobs over that
    store; None when ``data_dir`` is not set. The caller starts the runner (``start``, in its event loop), stops it."""
    if core.settings.data_dir is None:
        return None
    store = BatchStore(core.settings.data_dir, core.settings)
    jobs = CohereJobs(store)
    runner = BatchRunner(store, core, RouteCall(core), finalizers={COHERE_EMBED_JOB: jobs.finalize})
    return runner, jobs


def batch_api_off() -> NotFound:
    return NotFound(f"the batch API is off: start the service with a data folder ({Settings.named('data_dir')})")


def owner_of(headers: Iterable[tuple[bytes, bytes]], settings: Settings) -> str:
    """Who owns what a request makes: a SHA-256 of its API key ('' with keys off). The key middleware has checked it."""
    if not settings.api_keys:
        return ""
    _, _, token = (header(headers, b"authorization") or "").partition(" ")
    return hashlib.sha256(token.strip().encode()).hexdigest()


def runner_of(request: Request) -> tuple[BatchRunner, str]:
    runner: BatchRunner | None = request.app.state.batch_runner
    if runner is None:
        raise batch_api_off()
    return runner, owner_of(request.scope["headers"], request.app.state.settings)


def page(items: list[Any], has_more: bool) -> dict[str, Any]:
    data = [item.as_object() for item in items]
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"object": "list", "data": data, "first_id": first, "last_id": last, "has_more": has_more}


UPLOAD_ERRORS = error_responses(BadRequest, NotFound, PayloadTooLarge, UnsupportedMediaType, InvalidRequest)


@router.post(FILES_PATH, response_model=FileObject, responses=UPLOAD_ERRORS, openapi_extra=UPLOAD_BODY)
async def create_file() -> None:
    """Upload a batch input file (multipart: ``file``, JSONL with one request a line, and ``purpose=batch``); at most
    ``batch_max_file_bytes`` and ``batch_max_file_lines`` requests, within ``batch_max_stored_bytes`` in all."""
    raise batch_api_off()  # reached only with the Batch API off: with it on, FileUploadEntry answers uploads


@router.get(FILES_PATH, response_model=FileList, responses=error_responses(NotFound, ResourceNotFound, InvalidRequest))
async def list_files(
    request: Request,
    after: str | None = None,
    limit: int = Query(default=10_000, ge=1, le=10_000),
    order: Literal["asc", "desc"] = "desc",
    purpose: str | None = None,
) -> dict[str, Any]:
    """This key's files, newest first (``order``), after the file ``after``."""
    runner, owner = runner_of(request)
    return page(*runner.store.files(owner, after, limit, order, purpose))


@router.get(FILES_PATH + "/{file_id}", response_model=FileObject, responses=error_responses(NotFound, ResourceNotFound))
async def retrieve_file(file_id: str, request: Request) -> dict[str, Any]:
    runner, owner = runner_of(request)
    return runner.store.file(owner, file_id).as_object()


@router.get(
    FILES_PATH + "/{file_id}/content",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The file's bytes (JSONL).",
            "content": {CONTENT_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(NotFound, ResourceNotFound),
    },
)
async def file_content(file_id: str, request: Request) -> FileResponse:
    """The file's content: an uploaded input, or a batch's output or error file (JSONL)."""
    runner, owner = runner_of(request)
    record = runner.store.file(owner, file_id)
    return FileResponse(runner.store.path_of(record.id), media_type=CONTENT_TYPE, filename=record.filename)


@router.delete(
    FILES_PATH + "/{file_id}",
    response_model=FileDeleted,
    responses=error_responses(NotFound, ResourceNotFound, Conflict),
)
async def delete_file(file_id: str, request: Request) -> dict[str, Any]:
    """Delete a file (not the input of a batch that has not finished: 409)."""
    runner, owner = runner_of(request)
    await asyncio.to_thread(runner.store.delete_file, owner, file_id)
    return {"id": file_id, "object": "file", "deleted": True}


@router.post(
    "/v1/batches",
    response_model=BatchObject,
    responses=error_responses(
        BadRequest, NotFound, ResourceNotFound, PayloadTooLarge, UnsupportedMediaType, InvalidRequest, Overloaded
    ),
)
async def create_batch(body: BatchCreateRequest, request: Request) -> dict[str, Any]:
    """Run every request of an uploaded file through ``endpoint`` in the background, on the models' spare capacity;
    poll it with ``GET /v1/batches/{batch_id}``. At most ``batch_max_jobs_in_flight`` unfinished batches (429)."""
    runner, owner = runner_of(request)
    if body.endpoint not in BATCH_ROUTES:
        raise BadRequest(f"endpoint {body.endpoint!r} cannot be batched; one of: {', '.join(sorted(BATCH_ROUTES))}")
    batch = runner.store.create_batch(owner, body.input_file_id, body.endpoint, body.completion_window, body.metadata)
    runner.wake()
    return batch.as_object()


@router.get("/v1/batches/{batch_id}", response_model=BatchObject, responses=error_responses(NotFound, ResourceNotFound))
async def retrieve_batch(batch_id: str, request: Request) -> dict[str, Any]:
    runner, owner = runner_of(request)
    return runner.store.owned_batch(owner, batch_id).as_object()


@router.post(
    "/v1/batches/{batch_id}/cancel",
    response_model=BatchObject,
    responses=error_responses(NotFound, ResourceNotFound, Conflict),
)
async def cancel_batch(batch_id: str, request: Request) -> dict[str, Any]:
    """Cancel a batch: ``cancelling`` at once, ``cancelled`` once its running chunk is committed (what was answered
    stays in its output and error files)."""
    runner, owner = runner_of(request)
    batch = runner.store.cancel(owner, batch_id)
    runner.wake()
    return batch.as_object()


@router.get(
    "/v1/batches", response_model=BatchList, responses=error_responses(NotFound, ResourceNotFound, InvalidRequest)
)
async def list_batches(
    request: Request, after: str | None = None, limit: int = Query(default=20, ge=1, le=100)
) -> dict[str, Any]:
    """This key's batches, newest first, after the batch ``after``."""
    runner, owner = runner_of(request)
    records: tuple[list[BatchRecord], bool] = runner.store.batches(owner, after, limit)
    return page(*records)


UploadRead = Callable[[FormData, Scope], Awaitable[dict[str, Any]]]  # an upload's form -> the answer


@dataclass(frozen=True, slots=True)
class Upload:
    """A multipart upload route: the route FastAPI declares (docs, metrics label), what reads the form into the
    answer, and the fields it takes (the 415's hint)."""

    declared: BaseRoute
    read: UploadRead
    fields: str


def file_upload(runner: BatchRunner, settings: Settings) -> UploadRead:
    """``POST /v1/files``: the form's ``file`` stored as a batch input (``purpose=batch``)."""

    async def read(form: FormData, scope: Scope) -> dict[str, Any]:
        purpose, upload = form.get("purpose"), form.get("file")
        if not isinstance(purpose, str):
            raise InvalidRequest("the form has no 'purpose' field: send purpose=batch")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("the form has no 'file' part")
        owner = owner_of(scope["headers"], settings)
        name = upload.filename or "input.jsonl"
        record = await asyncio.to_thread(runner.store.add_upload, owner, name, purpose, upload.file)
        return record.as_object()

    return read


class UploadEntry:
    """Answers the multipart upload routes (``POST /v1/files``, ``POST /v1/datasets``) before the request body reader
    (``BodyReadMiddleware``, whose ``max_body_bytes`` is for JSON requests): the multipart body streams to temporary
    files, at most ``batch_max_file_bytes`` plus the form's framing (413, connection closed, past it), within
    ``body_timeout_s`` per ``max_body_bytes`` received. Everything else goes on to ``app``. Sits inside the API key
    and metrics middlewares."""

    def __init__(self, app: ASGIApp, settings: Settings, uploads: Mapping[str, Upload]) -> None:
        self.app = app
        self.settings = settings
        self.uploads = dict(uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        upload = self.uploads.get(route_path(scope)) if scope["type"] == "http" and scope["method"] == "POST" else None
        if upload is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = upload.declared  # the metrics label it by its path, as routing would
        try:
            answer = await self._upload(scope, receive, upload)
        except ClientDisconnect:  # the client left while sending: nobody to answer
            return
        except ServiceError as error:
            await send_error(send, error, scope["path"], close=True)
            return
        await send_json(send, 200, answer)

    async def _upload(self, scope: Scope, receive: Receive, upload: Upload) -> dict[str, Any]:
        content_type = header(scope["headers"], b"content-type") or ""
        if not content_type.startswith("multipart/form-data"):
            raise UnsupportedMediaType(f"send the file as multipart/form-data with the fields {upload.fields}")
        limit = self.settings.batch_max_file_bytes + FORM_SLACK_BYTES
        declared = header(scope["headers"], b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise self._too_large()
        expected = int(declared) if declared is not None and declared.isdigit() else limit
        deadline_s = self.settings.body_timeout_s * max(1.0, expected / self.settings.max_body_bytes)
        request = Request(scope, self._bounded(receive, limit))
        try:
            async with asyncio.timeout(deadline_s):
                form = await request.form(max_files=2, max_fields=8)
        except TimeoutError:
            raise BadRequest(f"the upload did not arrive within {deadline_s:.0f} s (body_timeout_s)") from None
        except (MultiPartException, HTTPException) as exc:
            raise BadRequest(f"the multipart body cannot be read: {getattr(exc, 'detail', None) or exc}") from None
        try:
            return await upload.read(form, scope)
        finally:
            await form.close()

    def _too_large(self) -> PayloadTooLarge:
        limit = self.settings.batch_max_file_bytes
        return PayloadTooLarge(f"the file is larger than {limit} bytes ({Settings.named('batch_max_file_bytes')})")

    def _bounded(self, receive: Receive, limit: int) -> Receive:
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise self._too_large()
            return message

        return bounded
