"""Batch jobs' durable state under ``data_dir``: ``batches.sqlite3`` (files and batches, stdlib sqlite3, WAL, full
sync) and ``files/<file id>.jsonl`` (uploads, and each batch's output and error files, written in place while it
runs and listed as files when it finishes).

A batch's progress is one row: ``done_lines`` input lines answered and the committed sizes of its two work files.
``commit_chunk`` appends a chunk's entries to the work files, syncs them, then commits the row; ``resume`` cuts the
work files back to the committed sizes, so whatever a killed process appended past its last commit is dropped and
each input line has exactly one entry. Limits raise the service's errors, naming their setting.

One connection per process, shared by the event loop (the routes) and the runner's thread, behind a lock. Several
processes may share the folder (``--processes N``): SQLite's own locking orders their transactions, and only the
process holding the runner's lead (``service.batch.locks``) runs batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from service.batch.locks import RunnerLead, remove_orphans, writing
from service.batch.records import (
    CANCELLED,
    CANCELLING,
    COMPLETION_WINDOWS,
    FAILED,
    FINALIZING,
    FINISHED,
    IN_PROGRESS,
    INPUT_PURPOSE,
    OPENAI,
    OUTPUT_PURPOSE,
    TIMESTAMPS,
    UNFINISHED,
    VALIDATING,
    BatchRecord,
    FileRecord,
)
from service.errors import BadRequest, Conflict, Overloaded, PayloadTooLarge, ResourceNotFound
from service.settings import Settings

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, owner TEXT NOT NULL, filename TEXT NOT NULL,
    purpose TEXT NOT NULL, bytes INTEGER NOT NULL, lines INTEGER NOT NULL, created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, owner TEXT NOT NULL, endpoint TEXT NOT NULL,
    input_file_id TEXT NOT NULL, completion_window TEXT NOT NULL, metadata TEXT, status TEXT NOT NULL, errors TEXT,
    created_at INTEGER NOT NULL, in_progress_at INTEGER, expires_at INTEGER NOT NULL, finalizing_at INTEGER,
    completed_at INTEGER, failed_at INTEGER, expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
    total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,
    done_lines INTEGER NOT NULL DEFAULT 0, output_bytes INTEGER NOT NULL DEFAULT 0,
    error_bytes INTEGER NOT NULL DEFAULT 0, work_output_id TEXT NOT NULL, work_error_id TEXT NOT NULL,
    output_file_id TEXT, error_file_id TEXT, origin TEXT NOT NULL DEFAULT 'openai'
);
CREATE TABLE IF NOT EXISTS datasets (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, owner TEXT NOT NULL, name TEXT NOT NULL,
    dataset_type TEXT NOT NULL, created_at INTEGER NOT NULL, validation_status TEXT NOT NULL, validation_error TEXT,
    warnings TEXT NOT NULL, schema TEXT NOT NULL, preserve_fields TEXT NOT NULL, rows INTEGER NOT NULL,
    bytes INTEGER NOT NULL, samples TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS embed_jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, owner TEXT NOT NULL, name TEXT,
    batch_id TEXT NOT NULL, input_dataset_id TEXT NOT NULL, output_dataset_id TEXT, model TEXT NOT NULL,
    input_type TEXT NOT NULL, embedding_types TEXT NOT NULL, truncate TEXT NOT NULL, created_at INTEGER NOT NULL
);
"""
ADDED_COLUMNS = {"batches": {"origin": "TEXT NOT NULL DEFAULT 'openai'"}}  # a data folder of an older version
COPY_BYTES = 1 << 20
BUSY_TIMEOUT_S = 30.0  # how long a write waits for another process's transaction before it fails
MAX_PAGE = 10_000  # the most objects one list answers (OpenAI's files list allows as many)


def now() -> int:
    return int(time.time())


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def statuses(names: tuple[str, ...]) -> str:
    """An SQL list of status names (constants of ``records``, never input): ``('validating', 'in_progress')``."""
    return "(" + ", ".join(f"'{name}'" for name in names) + ")"


def count_lines(path: Path) -> int:
    """Non-blank lines: the requests a batch input holds."""
    with path.open("rb") as source:
        return sum(1 for line in source if line.strip())


class BatchStore:
    def __init__(self, folder: Path, settings: Settings) -> None:
        self.folder = folder
        self.settings = settings
        self.files_dir = folder / "files"
        self.files_dir.mkdir(parents=True, exist_ok=True)
        remove_orphans(self.files_dir)  # uploads a killed process never finished
        self.lead = RunnerLead(folder)  # held by the one process whose runner runs the batches (service.batch.locks)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            folder / "batches.sqlite3", check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S
        )
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        for table, columns in ADDED_COLUMNS.items():
            present = {row["name"] for row in self._db.execute(f"PRAGMA table_info({table})")}
            for name, declared in columns.items():
                if name not in present:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declared}")

    def close(self) -> None:
        with self._lock:
            self._db.close()
        self.lead.release()

    def data_version(self) -> int:
        """Changes whenever another connection (another process) commits to the database."""
        with self._lock:
            return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def one(self, query: str, *args: Any) -> sqlite3.Row | None:
        with self._lock:
            row: sqlite3.Row | None = self._db.execute(query, args).fetchone()
            return row

    def path_of(self, file_id: str) -> Path:
        return self.files_dir / f"{file_id}.jsonl"

    # files

    def add_upload(self, owner: str, filename: str, purpose: str, upload: IO[bytes]) -> FileRecord:
        """Copy an uploaded batch input into the store (blocking: call it in a thread): its size and lines within
        their limits, and the store's total within ``batch_max_stored_bytes``."""
        if purpose != INPUT_PURPOSE:
            raise BadRequest(
                f"purpose must be {INPUT_PURPOSE!r} (this service stores batch inputs only), not {purpose!r}"
            )
        limit = self.settings.batch_max_file_bytes
        file_id = new_id("file-")
        partial = self.files_dir / f"{file_id}.part"
        with writing(partial):
            size = 0
            with partial.open("wb") as target:
                while chunk := upload.read(COPY_BYTES):
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(
                            f"the file is larger than {limit} bytes ({Settings.named('batch_max_file_bytes')})"
                        )
                    target.write(chunk)
                target.flush()
                os.fsync(target.fileno())
            lines = count_lines(partial)
            if lines > self.settings.batch_max_file_lines:
                raise PayloadTooLarge(
                    f"the file holds {lines} requests; the limit is {self.settings.batch_max_file_lines} "
                    f"({Settings.named('batch_max_file_lines')})"
                )
            with self.transaction() as db:
                self.check_room(db, size, "the file")
                record = FileRecord(file_id, owner, filename, purpose, size, lines, now())
                partial.rename(self.path_of(file_id))
                self._insert_file(db, record)
        return record

    @staticmethod
    def stored_bytes(db: sqlite3.Connection) -> int:
        """Bytes the data folder holds: files, datasets' parts, and what unfinished batches wrote so far."""
        unfinished = statuses(UNFINISHED)
        query = (
            "SELECT (SELECT COALESCE(SUM(bytes), 0) FROM files) + (SELECT COALESCE(SUM(bytes), 0) FROM datasets) + "
            f"(SELECT COALESCE(SUM(output_bytes + error_bytes), 0) FROM batches WHERE status IN {unfinished})"
        )
        return int(db.execute(query).fetchone()[0])

    def check_room(self, db: sqlite3.Connection, size: int, what: str) -> None:
        """413 unless ``size`` more bytes keep the folder within ``batch_max_stored_bytes``."""
        stored = self.stored_bytes(db)
        if stored + size > self.settings.batch_max_stored_bytes:
            raise PayloadTooLarge(
                f"{stored} bytes are stored already and {what} has {size}; the limit is "
                f"{self.settings.batch_max_stored_bytes} ({Settings.named('batch_max_stored_bytes')}): "
                "delete files or datasets first"
            )

    @staticmethod
    def _insert_file(db: sqlite3.Connection, record: FileRecord) -> None:
        db.execute(
            "INSERT INTO files (id, owner, filename, purpose, bytes, lines, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (record.id, record.owner, record.filename, record.purpose, record.bytes, record.lines, record.created_at),
        )

    def file(self, owner: str, file_id: str) -> FileRecord:
        row = self.one("SELECT * FROM files WHERE id = ? AND owner = ?", file_id, owner)
        if row is None:
            raise ResourceNotFound(f"no file with id {file_id!r}")
        return FileRecord.of(row)

    def files(
        self, owner: str, after: str | None, limit: int, order: str = "desc", purpose: str | None = None
    ) -> tuple[list[FileRecord], bool]:
        """A page of the owner's files by creation (``order``), after the file ``after``; and whether more follow."""
        rows = self.page("files", owner, after, limit, order, ("purpose", purpose) if purpose else None)
        return [FileRecord.of(row) for row in rows[:limit]], len(rows) > limit

    def page(
        self, table: str, owner: str, after: str | None, limit: int, order: str, where: tuple[str, str] | None = None
    ) -> list[sqlite3.Row]:
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"limit must be between 1 and {MAX_PAGE}, not {limit}")
        clauses, args = ["owner = ?"], [owner]
        if where is not None:
            clauses.append(f"{where[0]} = ?")
            args.append(where[1])
        if after is not None:
            cursor = self.one(f"SELECT seq FROM {table} WHERE id = ? AND owner = ?", after, owner)
            if cursor is None:
                raise ResourceNotFound(f"'after' names no object of this list: {after!r}")
            clauses.append("seq > ?" if order == "asc" else "seq < ?")
            args.append(cursor["seq"])
        direction = "ASC" if order == "asc" else "DESC"
        query = f"SELECT * FROM {table} WHERE {' AND '.join(clauses)} ORDER BY seq {direction} LIMIT ?"
        with self._lock:
            return list(self._db.execute(query, (*args, limit + 1)).fetchall())

    def delete_file(self, owner: str, file_id: str) -> None:
        with self.transaction() as db:
            self.file(owner, file_id)
            query = f"SELECT id FROM batches WHERE input_file_id = ? AND status IN {statuses(UNFINISHED)}"
            running = db.execute(query, (file_id,)).fetchone()
            if running is not None:
                raise Conflict(f"file {file_id!r} is the input of batch {running['id']}, which has not finished")
            db.execute("DELETE FROM files WHERE id = ?", (file_id,))
        self.path_of(file_id).unlink(missing_ok=True)

    # batches, as the routes see them

    def create_batch(
        self, owner: str, input_file_id: str, endpoint: str, completion_window: str, metadata: dict[str, str] | None
    ) -> BatchRecord:
        """An OpenAI batch of the owner's uploaded file ``input_file_id``."""
        with self.transaction() as db:
            source = self.file(owner, input_file_id)
            if source.purpose != INPUT_PURPOSE:
                raise BadRequest(f"file {input_file_id!r} has purpose {source.purpose!r}, not {INPUT_PURPOSE!r}")
            batch_id = self.insert_batch(db, owner, input_file_id, endpoint, completion_window, metadata, OPENAI)
        return self.batch(batch_id)

    def insert_batch(
        self,
        db: sqlite3.Connection,
        owner: str,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, str] | None,
        origin: str,
    ) -> str:
        """A new batch (within ``batch_max_jobs_in_flight``, else 429) inside the caller's transaction; its id. A
        batch of another ``origin`` than OpenAI's runs a job of another API: its input is a file of the folder that
        no files list shows, and it is not one of OpenAI's batches."""
        query = f"SELECT COUNT(*) FROM batches WHERE status IN {statuses(UNFINISHED)}"
        in_flight, limit = db.execute(query).fetchone()[0], self.settings.batch_max_jobs_in_flight
        if in_flight >= limit:
            raise Overloaded(
                f"{in_flight} batch jobs have not finished; the limit is {limit} "
                f"({Settings.named('batch_max_jobs_in_flight')})",
                retry_after_s=60,
            )
        created, batch_id = now(), new_id("batch_")
        db.execute(
            "INSERT INTO batches (id, owner, endpoint, input_file_id, completion_window, metadata, status, created_at, "
            "expires_at, work_output_id, work_error_id, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                batch_id, owner, endpoint, input_file_id, completion_window,
                None if metadata is None else json.dumps(metadata), VALIDATING,
                created, created + COMPLETION_WINDOWS[completion_window], new_id("file-"), new_id("file-"), origin,
            ),
        )  # fmt: skip
        return batch_id

    def owned_batch(self, owner: str, batch_id: str, origin: str = OPENAI) -> BatchRecord:
        row = self.one("SELECT * FROM batches WHERE id = ? AND owner = ? AND origin = ?", batch_id, owner, origin)
        if row is None:
            raise ResourceNotFound(f"no batch with id {batch_id!r}")
        return BatchRecord.of(row)

    def batches(self, owner: str, after: str | None, limit: int) -> tuple[list[BatchRecord], bool]:
        """A page of the owner's batches, newest first, after the batch ``after``; and whether more follow."""
        rows = self.page("batches", owner, after, limit, "desc", ("origin", OPENAI))
        return [BatchRecord.of(row) for row in rows[:limit]], len(rows) > limit

    def cancel(self, owner: str, batch_id: str, origin: str = OPENAI) -> BatchRecord:
        """A batch that has not started or is running turns ``cancelling`` (the runner ends it ``cancelled``); one
        cancelling or cancelled already stays as it is; any other is a 409."""
        with self.transaction() as db:
            batch = self.owned_batch(owner, batch_id, origin)
            if batch.status in (VALIDATING, IN_PROGRESS):
                stamp = TIMESTAMPS[CANCELLING]
                db.execute(f"UPDATE batches SET status = ?, {stamp} = ? WHERE id = ?", (CANCELLING, now(), batch_id))
            elif batch.status not in (CANCELLING, CANCELLED):
                raise Conflict(f"batch {batch_id!r} is {batch.status}: it cannot be cancelled")
        return self.batch(batch_id)

    # batches, as the runner sees them

    def batch(self, batch_id: str) -> BatchRecord:
        row = self.one("SELECT * FROM batches WHERE id = ?", batch_id)
        if row is None:
            raise ResourceNotFound(f"no batch with id {batch_id!r}")
        return BatchRecord.of(row)

    def next_unfinished(self) -> BatchRecord | None:
        """The oldest batch a runner still owes work."""
        row = self.one(f"SELECT * FROM batches WHERE status IN {statuses(UNFINISHED)} ORDER BY seq LIMIT 1")
        return None if row is None else BatchRecord.of(row)

    def move(self, batch_id: str, status: str, from_statuses: tuple[str, ...], **fields: Any) -> bool:
        """Set ``status`` (and its timestamp, and ``fields``) if the batch is in one of ``from_statuses``."""
        values = {"status": status, **fields}
        if status in TIMESTAMPS:
            values[TIMESTAMPS[status]] = now()
        assignments = ", ".join(f"{name} = ?" for name in values)
        query = f"UPDATE batches SET {assignments} WHERE id = ? AND status IN {statuses(from_statuses)}"
        with self.transaction() as db:
            return db.execute(query, (*values.values(), batch_id)).rowcount == 1

    def work_paths(self, batch: BatchRecord) -> tuple[Path, Path]:
        return self.path_of(batch.work_output_id), self.path_of(batch.work_error_id)

    def resume(self, batch: BatchRecord) -> None:
        """Cut the work files back to what the last commit holds (create them when missing)."""
        for path, size in zip(self.work_paths(batch), (batch.output_bytes, batch.error_bytes), strict=True):
            with path.open("ab") as work:
                work.truncate(size)

    def commit_chunk(
        self, batch: BatchRecord, done_lines: int, output: bytes, errors: bytes, completed: int, failed: int
    ) -> BatchRecord:
        """Append a chunk's entries and sync them, then commit the batch's progress (blocking: call it in a thread)."""
        output_path, error_path = self.work_paths(batch)
        sizes = []
        for path, content, committed in (
            (output_path, output, batch.output_bytes),
            (error_path, errors, batch.error_bytes),
        ):
            with path.open("r+b") as work:
                work.seek(committed)
                work.write(content)
                work.truncate()
                work.flush()
                os.fsync(work.fileno())
            sizes.append(committed + len(content))
        with self.transaction() as db:
            db.execute(
                "UPDATE batches SET done_lines = ?, output_bytes = ?, error_bytes = ?, completed = completed + ?, "
                "failed = failed + ? WHERE id = ?",
                (done_lines, sizes[0], sizes[1], completed, failed, batch.id),
            )
        return self.batch(batch.id)

    def finish(self, batch_id: str, status: str) -> None:
        """End a batch ``status`` (completed, cancelled, expired): its non-empty work files become its output and
        error files, in the same transaction. Another API's batch lists no files: its work files and input go (that
        API's finalizer has kept what it answers with)."""
        assert status in FINISHED
        batch = self.batch(batch_id)
        if batch.origin != OPENAI:
            self.move(batch_id, status, UNFINISHED)
            for path in (*self.work_paths(batch), self.path_of(batch.input_file_id)):
                path.unlink(missing_ok=True)
            return
        listed: dict[str, str | None] = {"output_file_id": None, "error_file_id": None}
        with self.transaction() as db:
            for field, file_id, size, lines in (
                ("output_file_id", batch.work_output_id, batch.output_bytes, batch.completed),
                ("error_file_id", batch.work_error_id, batch.error_bytes, batch.failed),
            ):
                if size > 0:
                    name = f"{batch.id}_{'output' if field == 'output_file_id' else 'error'}.jsonl"
                    self._insert_file(db, FileRecord(file_id, batch.owner, name, OUTPUT_PURPOSE, size, lines, now()))
                    listed[field] = file_id
            stamp = TIMESTAMPS[status]
            query = f"UPDATE batches SET status = ?, {stamp} = ?, output_file_id = ?, error_file_id = ? WHERE id = ?"
            db.execute(query, (status, now(), listed["output_file_id"], listed["error_file_id"], batch.id))
        for field, file_id in (("output_file_id", batch.work_output_id), ("error_file_id", batch.work_error_id)):
            if listed[field] is None:
                self.path_of(file_id).unlink(missing_ok=True)

    def fail(self, batch_id: str, code: str, message: str) -> None:
        """End a batch ``failed`` with one error (its input could not be read); its work files go (and another API's
        input, which no files list shows)."""
        errors = json.dumps([{"code": code, "message": message, "param": None, "line": None}])
        self.move(batch_id, FAILED, UNFINISHED, errors=errors)
        batch = self.batch(batch_id)
        internal = (self.path_of(batch.input_file_id),) if batch.origin != OPENAI else ()
        for path in (*self.work_paths(batch), *internal):
            path.unlink(missing_ok=True)

    def finalizing(self, batch_id: str) -> bool:
        """In progress -> finalizing; False when it was cancelled meanwhile."""
        return self.move(batch_id, FINALIZING, (IN_PROGRESS, FINALIZING))
