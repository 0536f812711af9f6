"""Cohere's datasets and embed jobs over the batch store (same database, ``datasets/`` beside ``files/``).

- A dataset is an upload read into rows (``service.batch.dataset_rows``) and kept as one Avro part,
  ``datasets/<id>.avro``; one that fails validation is kept as a record saying why (``validation_status: failed``),
  as Cohere's. Its part is downloaded at a signed URL (``part_url``): the ``cohere`` client fetches parts without
  its API key, as it fetches Cohere's own signed URLs; the signature (HMAC-SHA256 under a key kept in the data
  folder) names the dataset and an expiry.
- An embed job is a batch of origin ``COHERE_EMBED_JOB``: its input dataset's rows in ``/v1/embed`` lines of up to
  ``LINE_ROWS`` texts (a line's ``custom_id`` names its rows, ``"16-32"``), so it runs on spare capacity, resumes
  after a restart and is cancelled as any batch is. When its lines are answered, ``finalize`` writes the output
  dataset (``embed-result``: each row's text, its embeddings by type and the input's preserved fields, in the
  input's order; the rows of a line the model refused are left out with a warning naming them) while the batch is
  still finalizing, so a process killed there writes it again.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
import time
import uuid
from collections.abc import Iterator
from dataclasses import astuple, dataclass, replace
from pathlib import Path
from typing import IO, Any

import orjson

from service.batch.dataset_rows import (
    EMBED_INPUT,
    EMBED_RESULT,
    MAX_WARNINGS,
    Malformed,
    RowRules,
    check_field_names,
    input_schema,
    read_rows,
    result_schema,
    write_part,
    write_rows,
)
from service.batch.locks import remove_orphans, writing
from service.batch.records import CANCELLED, CANCELLING, COMPLETED, FAILED, UNFINISHED, BatchRecord
from service.batch.store import BatchStore, now, statuses
from service.errors import BadRequest, Conflict, PayloadTooLarge, ResourceNotFound
from service.settings import Settings

COHERE_EMBED_JOB = "cohere_embed_job"  # the origin of the batches that run embed jobs
EMBED_URL, JOB_WINDOW = "/v1/embed", "24h"
VALIDATED, VALIDATION_FAILED = "validated", "failed"
PART_URL_TTL_S = 24 * 3600
LINE_ROWS = 16  # rows a /v1/embed line carries: the batcher regroups rows anyway; fewer lines, less work a row
PART_PATH = "/v1/dataset-parts/"  # + dataset id: the signed download route (the API key does not guard it)
SLUG = re.compile(r"[^a-z0-9]+")


def job_status(batch_status: str) -> str:
    """Cohere's embed job status of its batch's: processing, cancelling, cancelled, complete or failed."""
    if batch_status in (CANCELLING, CANCELLED):
        return batch_status
    return "processing" if batch_status in UNFINISHED else "complete" if batch_status == COMPLETED else FAILED


def iso(stamp: int) -> str:
    return dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat()


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    id: str
    owner: str
    name: str
    dataset_type: str
    created_at: int
    validation_status: str
    validation_error: str | None
    warnings: str  # JSON list
    schema: str  # JSON: the part's Avro schema
    preserve_fields: str  # JSON list
    rows: int
    bytes: int
    samples: str  # JSON list of the first rows, each as JSON

    @classmethod
    def of(cls, row: Any) -> DatasetRecord:
        return cls(*(row[name] for name in cls.__slots__))

    def insert(self, db: sqlite3.Connection, replacing: bool = False) -> None:
        verb = "INSERT OR REPLACE" if replacing else "INSERT"
        names = ", ".join(self.__slots__)
        db.execute(f"{verb} INTO datasets ({names}) VALUES ({_marks(len(self.__slots__))})", astuple(self))

    def as_object(self, part_url: str | None) -> dict[str, Any]:
        """Cohere's Dataset; its one part (when validated) at ``part_url``."""
        parts = []
        if self.validation_status == VALIDATED:
            part = {"id": f"{self.id}-0", "name": f"{self.id}-0.avro", "url": part_url, "index": 0}
            parts.append(part | {"size_bytes": self.bytes, "num_rows": self.rows, "samples": json.loads(self.samples)})
        return {
            "id": self.id,
            "name": self.name,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.created_at),
            "dataset_type": self.dataset_type,
            "validation_status": self.validation_status,
            "validation_error": self.validation_error,
            "schema": self.schema,
            "required_fields": ["text"],
            "preserve_fields": json.loads(self.preserve_fields),
            "dataset_parts": parts,
            "validation_warnings": json.loads(self.warnings),
        }


@dataclass(frozen=True, slots=True)
class EmbedJobRecord:
    id: str
    owner: str
    name: str | None
    batch_id: str
    input_dataset_id: str
    output_dataset_id: str | None
    model: str
    input_type: str
    embedding_types: str  # JSON list
    truncate: str
    created_at: int

    @classmethod
    def of(cls, row: Any) -> EmbedJobRecord:
        return cls(*(row[name] for name in cls.__slots__))

    def as_object(self, batch: BatchRecord) -> dict[str, Any]:
        """Cohere's EmbedJob, its status its batch's."""
        status = job_status(batch.status)
        return {
            "job_id": self.id,
            "name": self.name,
            "status": status,
            "created_at": iso(self.created_at),
            "input_dataset_id": self.input_dataset_id,
            "output_dataset_id": self.output_dataset_id if status == "complete" else None,
            "model": self.model,
            "truncate": self.truncate,
            "meta": {"api_version": {"version": "1"}},
        }


class CohereJobs:
    def __init__(self, store: BatchStore) -> None:
        self.store = store
        self.settings: Settings = store.settings
        self.folder = store.folder / "datasets"
        self.folder.mkdir(exist_ok=True)
        remove_orphans(self.folder)  # datasets a killed process was writing
        self._url_key = _url_key(store.folder / "part-url.key")

    def part_path(self, dataset_id: str) -> Path:
        return self.folder / f"{dataset_id}.avro"

    # signed part URLs

    def part_url(self, base_url: str, dataset_id: str) -> str:
        expires = int(time.time()) + PART_URL_TTL_S
        signature = self._sign(dataset_id, expires)
        return f"{base_url.rstrip('/')}{PART_PATH}{dataset_id}?expires={expires}&signature={signature}"

    def signed_part(self, dataset_id: str, expires: int, signature: str) -> Path:
        """The part a URL names, if its signature holds and it has not expired (404 alike otherwise)."""
        signed = hmac.compare_digest(self._sign(dataset_id, expires).encode(), signature.encode())
        valid = signed and expires >= time.time()
        row = self.store.one("SELECT id FROM datasets WHERE id = ? AND validation_status = ?", dataset_id, VALIDATED)
        if not valid or row is None:
            raise ResourceNotFound("no dataset part at this URL (or its signature has expired: get the dataset again)")
        return self.part_path(dataset_id)

    def _sign(self, dataset_id: str, expires: int) -> str:
        return hmac.new(self._url_key, f"{dataset_id}:{expires}".encode(), hashlib.sha256).hexdigest()

    # datasets

    def add(self, owner: str, name: str, rules: RowRules, filename: str, upload: IO[bytes]) -> DatasetRecord:
        """Read an upload into a dataset (blocking): validated, or failed with the reason."""
        if rules.dataset_type != EMBED_INPUT:
            raise BadRequest(
                f"type must be {EMBED_INPUT!r} (the dataset type embed jobs read), not {rules.dataset_type!r}"
            )
        try:
            check_field_names(rules.preserved)
        except Malformed as why:
            raise BadRequest(str(why)) from None
        dataset_id = f"{SLUG.sub('-', name.lower()).strip('-')[:40] or 'dataset'}-{secrets.token_hex(6)}"
        partial = self.folder / f"{dataset_id}.part"
        schema, preserved = json.dumps(input_schema(rules)), json.dumps(list(rules.preserved))
        record = DatasetRecord(dataset_id, owner, name, rules.dataset_type, now(), VALIDATED, None, "[]", schema,
                               preserved, 0, 0, "[]")  # fmt: skip
        with writing(partial):
            try:
                validation = write_rows(rules, filename, upload, partial)
            except Malformed as why:
                record = replace(record, validation_status=VALIDATION_FAILED, validation_error=str(why))
            else:
                if validation.rows > self.settings.batch_max_file_lines:
                    raise PayloadTooLarge(
                        f"the file holds {validation.rows} rows; the limit is {self.settings.batch_max_file_lines} "
                        f"({Settings.named('batch_max_file_lines')})"
                    )
                _sync(partial)
                record = replace(record, warnings=json.dumps(validation.summary()), rows=validation.rows,
                                 bytes=partial.stat().st_size, samples=json.dumps(validation.samples))  # fmt: skip
            with self.store.transaction() as db:
                self.store.check_room(db, record.bytes, "the dataset")
                if record.validation_status == VALIDATED:
                    partial.rename(self.part_path(dataset_id))
                record.insert(db)
        return self.dataset(owner, dataset_id)

    def dataset(self, owner: str, dataset_id: str) -> DatasetRecord:
        row = self.store.one("SELECT * FROM datasets WHERE id = ? AND owner = ?", dataset_id, owner)
        if row is None:
            raise ResourceNotFound(f"no dataset with id {dataset_id!r}")
        return DatasetRecord.of(row)

    def datasets(
        self, owner: str, dataset_type: str | None, validation_status: str | None, limit: int, offset: int
    ) -> list[DatasetRecord]:
        """The owner's datasets, newest first, of a type and status when given."""
        clauses, args = ["owner = ?"], [owner]
        for column, value in (("dataset_type", dataset_type), ("validation_status", validation_status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        query = f"SELECT * FROM datasets WHERE {' AND '.join(clauses)} ORDER BY seq DESC LIMIT ? OFFSET ?"
        with self.store.transaction() as db:
            return [DatasetRecord.of(row) for row in db.execute(query, (*args, limit, offset))]

    def usage(self, owner: str) -> int:
        row = self.store.one("SELECT COALESCE(SUM(bytes), 0) AS used FROM datasets WHERE owner = ?", owner)
        return int(row["used"]) if row is not None else 0

    def delete(self, owner: str, dataset_id: str) -> None:
        with self.store.transaction() as db:
            self.dataset(owner, dataset_id)
            query = (
                "SELECT embed_jobs.id FROM embed_jobs JOIN batches ON batches.id = embed_jobs.batch_id "
                f"WHERE embed_jobs.input_dataset_id = ? AND batches.status IN {statuses(UNFINISHED)}"
            )
            running = db.execute(query, (dataset_id,)).fetchone()
            if running is not None:
                raise Conflict(
                    f"dataset {dataset_id!r} is the input of embed job {running['id']}, which has not finished"
                )
            db.execute("DELETE FROM datasets WHERE id = ?", (dataset_id,))
        self.part_path(dataset_id).unlink(missing_ok=True)

    # embed jobs

    def create_job(self, owner: str, dataset_id: str, body: dict[str, Any], name: str | None) -> EmbedJobRecord:
        """An embed job of the owner's validated embed-input dataset (blocking): its rows in ``/v1/embed`` lines of
        ``body`` (model, input_type, embedding_types, truncate) with their texts."""
        dataset = self.dataset(owner, dataset_id)
        if dataset.dataset_type != EMBED_INPUT or dataset.validation_status != VALIDATED:
            raise BadRequest(
                f"dataset {dataset_id!r} is a {dataset.validation_status} {dataset.dataset_type} dataset: an embed job "
                f"reads a validated {EMBED_INPUT} one"
            )
        input_id = f"file-{secrets.token_hex(12)}"
        lines = self.store.path_of(input_id)
        try:
            with lines.open("wb") as out:
                for first, texts in _groups(read_rows(self.part_path(dataset_id)), self._group_limits()):
                    line = {"custom_id": f"{first}-{first + len(texts)}", "method": "POST", "url": EMBED_URL,
                            "body": body | {"texts": texts}}  # fmt: skip
                    out.write(orjson.dumps(line) + b"\n")
            _sync(lines)
            job = EmbedJobRecord(
                str(uuid.uuid4()), owner, name, "", dataset_id, f"{dataset_id}-embeddings-{secrets.token_hex(4)}",
                body["model"], body["input_type"], json.dumps(body["embedding_types"]), body["truncate"], now(),
            )  # fmt: skip
            with self.store.transaction() as db:
                self.store.check_room(db, lines.stat().st_size, "the job's requests")
                batch_id = self.store.insert_batch(db, owner, input_id, EMBED_URL, JOB_WINDOW, None, COHERE_EMBED_JOB)
                job = replace(job, batch_id=batch_id)
                names = ", ".join(job.__slots__)
                db.execute(f"INSERT INTO embed_jobs ({names}) VALUES ({_marks(len(job.__slots__))})", astuple(job))
        except BaseException:
            lines.unlink(missing_ok=True)
            raise
        return self.job(owner, job.id)[0]

    def _group_limits(self) -> tuple[int, int]:
        """Rows a line holds at most, and the JSON bytes of their texts: within the embed route's own limits."""
        return min(LINE_ROWS, self.settings.max_embedding_inputs), self.settings.max_body_bytes // 2

    def job(self, owner: str, job_id: str) -> tuple[EmbedJobRecord, BatchRecord]:
        row = self.store.one("SELECT * FROM embed_jobs WHERE id = ? AND owner = ?", job_id, owner)
        if row is None:
            raise ResourceNotFound(f"no embed job with id {job_id!r}")
        job = EmbedJobRecord.of(row)
        return job, self.store.batch(job.batch_id)

    def jobs(self, owner: str) -> list[tuple[EmbedJobRecord, BatchRecord]]:
        with self.store.transaction() as db:
            rows = db.execute("SELECT id FROM embed_jobs WHERE owner = ? ORDER BY seq DESC", (owner,)).fetchall()
        return [self.job(owner, row["id"]) for row in rows]

    def cancel_job(self, owner: str, job_id: str) -> None:
        job, _ = self.job(owner, job_id)
        self.store.cancel(owner, job.batch_id, COHERE_EMBED_JOB)

    def finalize(self, batch: BatchRecord) -> None:
        """The batch runner's finalizer for embed jobs (blocking): the output dataset of the answered lines."""
        row = self.store.one("SELECT * FROM embed_jobs WHERE batch_id = ?", batch.id)
        assert row is not None, f"batch {batch.id} runs no embed job"
        job = EmbedJobRecord.of(row)
        source = self.dataset(job.owner, job.input_dataset_id)
        output_path, error_path = self.store.work_paths(batch)
        preserved, types = json.loads(source.preserve_fields), json.loads(job.embedding_types)
        refused = [(_rows_of(entry), _reason(entry)) for entry in _entries(error_path)]
        warnings = [f"{_named(rows)} not embedded: {reason}" for rows, reason in refused[:MAX_WARNINGS]]
        if len(refused) > MAX_WARNINGS:
            unnamed = sum(len(rows) for rows, _ in refused[MAX_WARNINGS:])
            warnings.append(f"{unnamed} more rows were not embedded")
        counted = {"rows": 0}
        rows = _joined(read_rows(self.part_path(source.id)), _entries(output_path), preserved, types, counted)
        target = self.part_path(job.output_dataset_id or "")
        partial = target.with_suffix(".part")
        with writing(partial):
            write_part(partial, result_schema(preserved, types), rows)
            _sync(partial)
            partial.rename(target)
        record = DatasetRecord(job.output_dataset_id or "", job.owner, f"{job.name or job.id}-output", EMBED_RESULT,
                               now(), VALIDATED, None, json.dumps(warnings),
                               json.dumps(result_schema(preserved, types)), json.dumps(preserved), counted["rows"],
                               target.stat().st_size, "[]")  # fmt: skip
        with self.store.transaction() as db:
            record.insert(db, replacing=True)


def _groups(rows: Iterator[dict[str, Any]], limits: tuple[int, int]) -> Iterator[tuple[int, list[str]]]:
    """Consecutive rows' texts, at most ``limits`` (rows, JSON bytes) a group, a longer text alone: (first, texts)."""
    most_rows, most_bytes = limits
    first, size, texts = 0, 0, list[str]()
    for number, row in enumerate(rows):
        cost = len(orjson.dumps(row["text"]))
        if texts and (len(texts) == most_rows or size + cost > most_bytes):
            yield first, texts
            first, size, texts = number, 0, []
        texts.append(row["text"])
        size += cost
    if texts:
        yield first, texts


def _rows_of(entry: dict[str, Any]) -> range:
    first, _, stop = entry["custom_id"].partition("-")
    return range(int(first), int(stop))


def _joined(
    inputs: Iterator[dict[str, Any]],
    answers: Iterator[dict[str, Any]],
    preserved: list[str],
    types: list[str],
    counted: dict[str, int],
) -> Iterator[dict[str, Any]]:
    """Each input row with its line's embeddings (answers are in the rows' order; a row of a refused line is left
    out)."""
    answer = next(answers, None)
    covered = range(0) if answer is None else _rows_of(answer)
    for number, row in enumerate(inputs):
        while answer is not None and covered.stop <= number:
            answer = next(answers, None)
            covered = range(0) if answer is None else _rows_of(answer)
        if answer is None or number not in covered:
            continue
        embeddings, place = answer["response"]["body"]["embeddings"], number - covered.start
        counted["rows"] += 1
        yield {"text": row["text"], "embeddings": {kind: embeddings[kind][place] for kind in types}} | {
            name: row.get(name) for name in preserved
        }


def _named(rows: range) -> str:
    return f"row {rows.start + 1} was" if len(rows) == 1 else f"rows {rows.start + 1}-{rows.stop} were"


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open("rb") as lines:
        for line in lines:
            yield orjson.loads(line)  # an output file holds every row's vectors: ~3x json's speed


def _reason(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return str(entry["error"].get("message"))
    body = entry["response"]["body"]
    message = body.get("message") if isinstance(body, dict) else None
    return f"{entry['response']['status_code']}: {message or body}"


def _marks(count: int) -> str:
    return ", ".join("?" * count)


def _sync(path: Path) -> None:
    with path.open("rb+") as written:
        os.fsync(written.fileno())


def _url_key(path: Path) -> bytes:
    """The data folder's key for signing part URLs: made once (0600), so URLs stay valid across restarts."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        key = secrets.token_bytes(32)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(key)
            out.flush()
            os.fsync(out.fileno())
        return key
