"""Cohere's datasets and embed jobs over HTTP, served with the OpenAI Batch API when ``data_dir`` is set (else each
answers 404 saying how to turn it on). ``cohere.Client(base_url=...)`` works unchanged: ``datasets.create`` (multipart
``data``: ``.jsonl``, ``.csv``, ``.txt`` or ``.avro``; ``type=embed-input``), ``wait``, ``datasets.get / list /
delete / get_usage``, ``embed_jobs.create / get / list / cancel``, and ``utils.save_dataset`` of a job's output (its
parts are Avro at signed URLs, ``/v1/dataset-parts/...``, which the client fetches without its key).

An upload is validated as it is stored: ``create`` answers once the dataset is ``validated`` or ``failed``. An embed
job runs each row through ``/v1/embed`` as a batch does (spare capacity, resumed after a restart). With API keys on,
datasets and jobs belong to the key that made them. Nothing here logs a row's content.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse
from starlette.datastructures import FormData, UploadFile
from starlette.types import Scope

from service.api import cohere
from service.api.batch import UploadRead, batch_api_off, owner_of
from service.api.bodies import JSON_MEDIA_TYPE, encode_json
from service.api.entry import Incoming
from service.api.error_docs import error_responses
from service.batch.cohere_jobs import PART_PATH, CohereJobs
from service.batch.dataset_rows import EMBED_INPUT, FORMATS, RowRules
from service.errors import (
    BadRequest,
    Conflict,
    InvalidRequest,
    ModelNotFound,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    ResourceNotFound,
    UnsupportedMediaType,
)
from service.schemas.cohere_jobs import (
    DatasetCreated,
    DatasetGot,
    DatasetList,
    DatasetUsage,
    EmbedJob,
    EmbedJobCreated,
    EmbedJobCreateRequest,
    EmbedJobList,
)
from service.settings import Settings
from service.tasks.feature_extraction_cohere import CohereEmbedRequest

router = APIRouter(tags=["cohere jobs"])
DATASETS_PATH = "/v1/datasets"
EMBED_ROUTE = next(route for route in cohere.PROTOCOL.routes if route.path == "/v1/embed")
AVRO_MEDIA_TYPE = "application/octet-stream"  # Avro bytes, as a file download (generated clients take it)
LINE_SLACK_BYTES = 1024  # an embed job line's body beside its one text: model, input_type, embedding_types, truncate
MAX_OFFSET = 1 << 31  # SQLite's integers are 64-bit: a larger offset is a 422, not an overflow
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "data": {
                            "type": "string",
                            "format": "binary",
                            "description": f"The rows: a file named *{', *'.join(FORMATS)}.",
                        },
                    },
                }
            }
        },
    }
}
UPLOAD_QUERY = [
    {"name": "name", "in": "query", "required": True, "schema": {"type": "string"}},
    {"name": "type", "in": "query", "required": True, "schema": {"type": "string", "enum": [EMBED_INPUT]}},
    *({"name": name, "in": "query", "required": False, "schema": {"type": "boolean"}}
      for name in ("keep_original_file", "skip_malformed_input")),
    *({"name": name, "in": "query", "required": False, "schema": {"type": "array", "items": {"type": "string"}}}
      for name in ("keep_fields", "optional_fields")),
    *({"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
      for name in ("text_separator", "csv_delimiter")),
]  # fmt: skip


def jobs_of(request: Request) -> tuple[CohereJobs, str]:
    jobs: CohereJobs | None = request.app.state.cohere_jobs
    if jobs is None:
        raise batch_api_off()
    return jobs, owner_of(request.scope["headers"], request.app.state.settings)


def dataset_upload(jobs: CohereJobs, settings: Settings) -> UploadRead:
    """``POST /v1/datasets``: the form's ``data`` read into a dataset of the query's name, type and row rules."""

    async def read(form: FormData, scope: Scope) -> dict[str, Any]:
        query = Request(scope).query_params
        name, dataset_type = query.get("name"), query.get("type")
        if not name or not dataset_type:
            raise InvalidRequest("the query needs 'name' and 'type' (type=embed-input)")
        upload = form.get("data")
        if not isinstance(upload, UploadFile):
            raise InvalidRequest("the form has no 'data' part (the file of rows)")
        if form.get("eval_data") is not None:
            raise BadRequest("eval_data is for fine-tuning datasets, which this server does not take")
        delimiter = query.get("csv_delimiter", ",")
        if len(delimiter) != 1:
            raise BadRequest(f"csv_delimiter must be one character, not {delimiter!r}")
        separator = query.get("text_separator") or "\n"
        _flag(query.get("keep_original_file"), "keep_original_file")  # taken, and not kept
        rules = RowRules(
            dataset_type,
            keep_fields=_listed(query.getlist("keep_fields")),
            optional_fields=_listed(query.getlist("optional_fields")),
            skip_malformed_input=_flag(query.get("skip_malformed_input"), "skip_malformed_input"),
            text_separator=separator,
            csv_delimiter=delimiter,
            max_text_bytes=settings.max_body_bytes - LINE_SLACK_BYTES,  # (max_body_bytes) else a 413 in the job
        )
        owner = owner_of(scope["headers"], settings)
        filename = upload.filename or ""
        record = await asyncio.to_thread(jobs.add, owner, name, rules, filename, upload.file)
        return {"id": record.id}

    return read


def _flag(value: str | None, name: str) -> bool:
    """A boolean query parameter: true or false (left out: false)."""
    if value is None or value.lower() == "false":
        return False
    if value.lower() == "true":
        return True
    raise BadRequest(f"{name} must be true or false, not {value!r}")


def _listed(values: list[str]) -> tuple[str, ...]:
    """Repeated parameters, or one comma-separated."""
    return tuple(name.strip() for value in values for name in value.split(",") if name.strip())


@router.post(
    DATASETS_PATH,
    response_model=DatasetCreated,
    responses=error_responses(BadRequest, NotFound, PayloadTooLarge, UnsupportedMediaType, InvalidRequest),
    openapi_extra={**UPLOAD_BODY, "parameters": UPLOAD_QUERY},
)
async def create_dataset() -> None:
    """Upload an embed-input dataset (multipart ``data``; query ``name``, ``type=embed-input``, ``keep_fields``,
    ``optional_fields``, ``skip_malformed_input``, ``text_separator`` for .txt, ``csv_delimiter`` for .csv). Each row
    needs a non-empty ``text``; it is validated as it is stored. ``keep_original_file`` is taken and not kept."""
    raise batch_api_off()  # reached only with the batch jobs off: with them on, UploadEntry answers uploads


@router.get(DATASETS_PATH + "/usage", response_model=DatasetUsage, responses=error_responses(NotFound))
async def dataset_usage(request: Request) -> dict[str, Any]:
    """Bytes this key's datasets take."""
    jobs, owner = jobs_of(request)
    return {"organization_usage": jobs.usage(owner)}


@router.get(DATASETS_PATH, response_model=DatasetList, responses=error_responses(NotFound, InvalidRequest))
async def list_datasets(
    request: Request,
    dataset_type: str | None = Query(None, alias="datasetType"),
    validation_status: str | None = Query(None, alias="validationStatus"),
    limit: int = Query(default=100, ge=1, le=1000),
    offset: int = Query(default=0, ge=0, le=MAX_OFFSET),
) -> dict[str, Any]:
    """This key's datasets, newest first; of a type and validation status when given."""
    jobs, owner = jobs_of(request)
    found = jobs.datasets(owner, dataset_type, validation_status, limit, offset)
    return {"datasets": [dataset.as_object(jobs.part_url(str(request.base_url), dataset.id)) for dataset in found]}


@router.get(DATASETS_PATH + "/{id}", response_model=DatasetGot, responses=error_responses(NotFound, ResourceNotFound))
async def retrieve_dataset(id: str, request: Request) -> dict[str, Any]:
    """A dataset: its validation, schema and part (a signed Avro download URL)."""
    jobs, owner = jobs_of(request)
    dataset = jobs.dataset(owner, id)
    return {"dataset": dataset.as_object(jobs.part_url(str(request.base_url), dataset.id))}


@router.delete(
    DATASETS_PATH + "/{id}",
    response_model=dict[str, Any],
    responses=error_responses(NotFound, ResourceNotFound, Conflict),
)
async def delete_dataset(id: str, request: Request) -> dict[str, Any]:
    """Delete a dataset (not the input of an embed job that has not finished: 409)."""
    jobs, owner = jobs_of(request)
    await asyncio.to_thread(jobs.delete, owner, id)
    return {}


@router.get(
    PART_PATH + "{dataset_id}",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The part (Avro).",
            "content": {AVRO_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        },
        **error_responses(NotFound, ResourceNotFound, InvalidRequest),
    },
)
async def dataset_part(dataset_id: str, request: Request, expires: int = 0, signature: str = "") -> FileResponse:
    """A dataset's part at the signed URL its dataset lists (no API key: the signature is the credential)."""
    jobs, _ = jobs_of(request)
    path = jobs.signed_part(dataset_id, expires, signature)
    return FileResponse(path, media_type=AVRO_MEDIA_TYPE, filename=f"{dataset_id}-0.avro")


@router.post(
    "/v1/embed-jobs",
    response_model=EmbedJobCreated,
    responses=error_responses(
        BadRequest, NotFound, ResourceNotFound, ModelNotFound, UnsupportedMediaType, InvalidRequest, Overloaded
    ),
)
async def create_embed_job(body: EmbedJobCreateRequest, request: Request) -> dict[str, Any]:
    """Embed every row of a validated embed-input dataset in the background, on the models' spare capacity; poll it
    with ``GET /v1/embed-jobs/{id}``. Its output dataset (embed-result) holds each row's text, embeddings and
    preserved fields. At most ``batch_max_jobs_in_flight`` unfinished jobs and batches (429)."""
    jobs, owner = jobs_of(request)
    line = {"model": body.model, "input_type": body.input_type, "embedding_types": body.embedding_types or ["float"],
            "truncate": body.truncate}  # fmt: skip
    probe = line | {"texts": ["a"]}  # what each row's line is, checked once here: the model, its task, int8's ranges
    assert EMBED_ROUTE.decode is not None
    decoded = EMBED_ROUTE.decode(Incoming(encode_json(probe), JSON_MEDIA_TYPE, [], {}), request.app.state.registry)
    assert isinstance(decoded.request, CohereEmbedRequest)
    request.app.state.registry.select(decoded.request.task, body.model)
    job = await asyncio.to_thread(jobs.create_job, owner, body.dataset_id, line, body.name)
    request.app.state.batch_runner.wake()
    return {"job_id": job.id, "meta": {"api_version": {"version": "1"}}}


@router.get("/v1/embed-jobs", response_model=EmbedJobList, responses=error_responses(NotFound))
async def list_embed_jobs(request: Request) -> dict[str, Any]:
    """This key's embed jobs, newest first."""
    jobs, owner = jobs_of(request)
    return {"embed_jobs": [job.as_object(batch) for job, batch in jobs.jobs(owner)]}


@router.get("/v1/embed-jobs/{id}", response_model=EmbedJob, responses=error_responses(NotFound, ResourceNotFound))
async def retrieve_embed_job(id: str, request: Request) -> dict[str, Any]:
    jobs, owner = jobs_of(request)
    job, batch = jobs.job(owner, id)
    return job.as_object(batch)


@router.post(
    "/v1/embed-jobs/{id}/cancel",
    response_model=dict[str, Any],
    responses=error_responses(NotFound, ResourceNotFound, Conflict),
)
async def cancel_embed_job(id: str, request: Request) -> dict[str, Any]:
    """Cancel an embed job: ``cancelling`` at once, ``cancelled`` once its running chunk is committed (no output)."""
    jobs, owner = jobs_of(request)
    jobs.cancel_job(owner, id)
    request.app.state.batch_runner.wake()
    return {}
