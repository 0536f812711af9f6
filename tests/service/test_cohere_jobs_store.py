"""Cohere's datasets and embed jobs in the batch store, without a server: a job's output made twice (a process killed
while finalizing) is one dataset; a row the model refused is left out with a warning; signed part URLs expire and
name one dataset; a data folder of the version before embed jobs opens with its batches as OpenAI's; rows Avro cannot
hold and damaged Avro uploads are malformed, never a server error."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path
from random import Random
from typing import Any

import fastavro
import pytest

from service.batch.cohere_jobs import COHERE_EMBED_JOB, CohereJobs
from service.batch.dataset_rows import Malformed, RowRules, read_rows, write_rows
from service.batch.lines import answered
from service.batch.records import FINALIZING, IN_PROGRESS, VALIDATING
from service.batch.store import BatchStore
from service.errors import ResourceNotFound
from service.settings import Settings

LINE = {"model": "embed", "input_type": "clustering", "embedding_types": ["float", "ubinary"], "truncate": "END"}


def open_jobs(folder: Path, **settings: Any) -> CohereJobs:
    return CohereJobs(BatchStore(folder, Settings(data_dir=folder, **settings)))  # type: ignore[call-arg]


def dataset_of(jobs: CohereJobs, texts: list[str]) -> str:
    rows = b"".join(json.dumps({"text": text, "n": n}).encode() + b"\n" for n, text in enumerate(texts))
    rules = RowRules("embed-input", keep_fields=("n",))
    return jobs.add("", "texts", rules, "rows.jsonl", io.BytesIO(rows)).id


def test_finalizing_twice_makes_one_output_without_the_refused_line(tmp_path: Path) -> None:
    jobs = open_jobs(tmp_path, max_embedding_inputs=2)  # lines of two rows at most
    job = jobs.create_job("", dataset_of(jobs, ["a", "b", "c", "d", "e"]), LINE, "twice")
    batch = jobs.store.batch(job.batch_id)
    assert batch.origin == COHERE_EMBED_JOB and batch.endpoint == "/v1/embed"
    lines = [json.loads(line) for line in jobs.store.path_of(batch.input_file_id).read_text().splitlines()]
    assert [(line["custom_id"], line["body"]["texts"]) for line in lines] == [
        ("0-2", ["a", "b"]), ("2-4", ["c", "d"]), ("4-5", ["e"]),
    ]  # fmt: skip
    assert all(line["body"] == LINE | {"texts": line["body"]["texts"]} for line in lines)
    jobs.store.move(batch.id, IN_PROGRESS, (VALIDATING,), total=3)
    jobs.store.resume(batch)
    answers = {"0-2": [[0.0, 0.5], [1.0, 0.5]], "4-5": [[4.0, 0.5]]}
    output = b"".join(
        answered(batch.id, n, rows, 200, {"embeddings": {"float": vectors, "ubinary": [[7]] * len(vectors)}})
        for n, (rows, vectors) in enumerate(answers.items())
    )
    error = answered(batch.id, 1, "2-4", 400, {"message": "too long"})
    batch = jobs.store.commit_chunk(jobs.store.batch(batch.id), 3, output, error, 2, 1)
    jobs.store.move(batch.id, FINALIZING, (IN_PROGRESS,))
    jobs.finalize(batch)
    jobs.finalize(jobs.store.batch(batch.id))  # the process was killed after the first: the runner runs it again
    datasets = jobs.datasets("", "embed-result", None, 10, 0)
    assert [dataset.id for dataset in datasets] == [job.output_dataset_id]
    (result,) = datasets
    assert (result.name, result.rows, json.loads(result.warnings)) == (
        "twice-output", 3, ["rows 3-4 were not embedded: 400: too long"],
    )  # fmt: skip
    rows = list(read_rows(jobs.part_path(result.id)))
    assert rows == [
        {"text": text, "embeddings": {"float": [float(n), 0.5], "ubinary": [7]}, "n": n}
        for n, text in ((0, "a"), (1, "b"), (4, "e"))
    ]


def test_part_urls_are_signed_for_one_dataset_and_expire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = open_jobs(tmp_path)
    first, second = dataset_of(jobs, ["a"]), dataset_of(jobs, ["b"])
    url = jobs.part_url("http://server/", first)
    query = dict(part.split("=") for part in url.split("?")[1].split("&"))
    expires, signature = int(query["expires"]), query["signature"]
    assert url.startswith(f"http://server/v1/dataset-parts/{first}?")
    assert jobs.signed_part(first, expires, signature) == jobs.part_path(first)
    for dataset, stamp, signed in ((second, expires, signature), (first, expires + 1, signature)):
        with pytest.raises(ResourceNotFound):
            jobs.signed_part(dataset, stamp, signed)
    assert open_jobs(tmp_path).signed_part(first, expires, signature)  # the key is the folder's: a restart keeps it
    monkeypatch.setattr(time, "time", lambda: expires + 1.0)
    with pytest.raises(ResourceNotFound):
        jobs.signed_part(first, expires, signature)


def test_a_data_folder_from_before_embed_jobs_opens_with_its_batches_as_openais(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "batches.sqlite3") as db:
        db.execute(
            "CREATE TABLE batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, owner TEXT NOT NULL,"
            " endpoint TEXT NOT NULL, input_file_id TEXT NOT NULL, completion_window TEXT NOT NULL, metadata TEXT, "
            "status TEXT NOT NULL, errors TEXT, created_at INTEGER NOT NULL, in_progress_at INTEGER, expires_at "
            "INTEGER NOT NULL, finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER, expired_at INTEGER, "
            "cancelling_at INTEGER, cancelled_at INTEGER, total INTEGER NOT NULL DEFAULT 0, completed INTEGER NOT NULL "
            "DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0, done_lines INTEGER NOT NULL DEFAULT 0, output_bytes INTEGER "
            "NOT NULL DEFAULT 0, error_bytes INTEGER NOT NULL DEFAULT 0, work_output_id TEXT NOT NULL, work_error_id "
            "TEXT NOT NULL, output_file_id TEXT, error_file_id TEXT)"
        )
        db.execute(
            "INSERT INTO batches (id, owner, endpoint, input_file_id, completion_window, status, created_at, "
            "expires_at, work_output_id, work_error_id) VALUES ('batch_old', '', '/v1/embeddings', 'file-x', '24h', "
            "'completed', 1, 2, 'file-o', 'file-e')"
        )
    store = open_jobs(tmp_path).store
    batches, _ = store.batches("", None, 10)
    assert [(batch.id, batch.origin) for batch in batches] == [("batch_old", "openai")]
    assert store.owned_batch("", "batch_old").status == "completed"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"[" * 100_000, "nested too deeply"),
        (b'{"text": "a", "n": 99999999999999999999999}', "integer past 64 bits"),
        (b'{"text": "a\\ud800"}', "lone surrogate"),
        (b'{"text": "a", "n": {"deep": 1}}', "not a string, number or boolean"),
        (b'{"text": "   "}', "'text' must be a non-empty string"),
    ],
)
def test_rows_avro_cannot_hold_are_malformed(line: bytes, reason: str, tmp_path: Path) -> None:
    rules = RowRules("embed-input", optional_fields=("n",))
    with pytest.raises(Malformed, match=reason):
        write_rows(rules, "rows.jsonl", io.BytesIO(line + b"\n"), tmp_path / "part.avro")


def test_damaged_avro_uploads_are_malformed_never_another_error(tmp_path: Path) -> None:
    """Valid Avro files with a few bytes changed or cut (header, schema, block counts, deflate blocks): fastavro's
    errors are many kinds, and each must read as the dataset's validation error."""
    schema = {"type": "record", "name": "Row", "fields": [
        {"name": "text", "type": "string"}, {"name": "n", "type": ["null", "long", {"type": "map", "values": "int"}]},
    ]}  # fmt: skip
    rules, rng, outcomes = RowRules("embed-input", optional_fields=("n",), skip_malformed_input=True), Random(7), set()
    for codec in ("null", "deflate"):
        written = io.BytesIO()
        rows = [{"text": f"row {n}", "n": n if n % 2 else {"k": n}} for n in range(40)]
        fastavro.writer(written, fastavro.parse_schema(schema), rows, codec=codec)
        for _ in range(1500):
            damaged = bytearray(written.getvalue())
            for _ in range(rng.randint(1, 4)):
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            try:
                write_rows(
                    rules, "rows.avro", io.BytesIO(bytes(damaged[: rng.randint(1, len(damaged))])), tmp_path / "p"
                )
                outcomes.add("read")
            except Malformed:
                outcomes.add("malformed")
    assert "malformed" in outcomes


def test_a_failed_or_cancelled_job_leaves_no_files_of_its_batch(tmp_path: Path) -> None:
    jobs = open_jobs(tmp_path)
    for end in ("failed", "cancelled"):
        job = jobs.create_job("", dataset_of(jobs, ["a", "b"]), LINE, end)
        batch = jobs.store.batch(job.batch_id)
        jobs.store.resume(batch)  # the runner's work files, as a started batch has them
        batch_files = [jobs.store.path_of(batch.input_file_id), *jobs.store.work_paths(batch)]
        assert all(path.exists() for path in batch_files)
        if end == "failed":
            jobs.store.fail(batch.id, "batch_failed", "the input could not be read")
        else:
            jobs.cancel_job("", job.id)
            assert jobs.job("", job.id)[0].as_object(jobs.store.batch(batch.id))["status"] == "cancelling"
            jobs.store.finish(batch.id, "cancelled")
        record, ended = jobs.job("", job.id)
        assert (record.as_object(ended)["status"], record.as_object(ended)["output_dataset_id"]) == (end, None)
        assert not any(path.exists() for path in batch_files)
    assert jobs.store.files("", None, 10)[0] == []  # none of them is an OpenAI file


def test_lines_group_rows_within_the_embed_routes_limits() -> None:
    from service.batch.cohere_jobs import _groups

    rows = iter({"text": text} for text in ["a", "x" * 40, "b", "c", "d", "e", "f"])
    assert list(_groups(rows, (4, 30))) == [(0, ["a"]), (1, ["x" * 40]), (2, ["b", "c", "d", "e"]), (6, ["f"])]


def test_a_job_whose_lines_were_all_refused_names_ten_and_counts_the_rest(tmp_path: Path) -> None:
    jobs = open_jobs(tmp_path, max_embedding_inputs=2)
    job = jobs.create_job("", dataset_of(jobs, [f"t{n}" for n in range(30)]), LINE, None)
    batch = jobs.store.batch(job.batch_id)
    jobs.store.move(batch.id, IN_PROGRESS, (VALIDATING,), total=15)
    jobs.store.resume(batch)
    errors = b"".join(answered(batch.id, n, f"{2 * n}-{2 * n + 2}", 404, {"message": "gone"}) for n in range(15))
    batch = jobs.store.commit_chunk(jobs.store.batch(batch.id), 15, b"", errors, 0, 15)
    jobs.finalize(batch)
    (result,) = jobs.datasets("", "embed-result", None, 10, 0)
    warnings = json.loads(result.warnings)
    assert result.rows == 0 and list(read_rows(jobs.part_path(result.id))) == []
    assert warnings[0] == "rows 1-2 were not embedded: 404: gone" and warnings[9].startswith("rows 19-20 were")
    assert warnings[10:] == ["10 more rows were not embedded"]


def test_a_text_no_embed_request_could_carry_is_malformed(tmp_path: Path) -> None:
    rules = RowRules("embed-input", max_text_bytes=40, skip_malformed_input=True)
    rows = [{"text": "é" * 19}, {"text": "é" * 20}, {"text": "\u0001" * 7}, {"text": "a" * 38}]  # 40, 42, 44, 40 bytes
    upload = io.BytesIO(b"".join(json.dumps(row).encode() + b"\n" for row in rows))
    validation = write_rows(rules, "rows.jsonl", upload, tmp_path / "part.avro")
    assert validation.rows == 2 and [warning.split(":")[0] for warning in validation.warnings] == [
        "row 2 was dropped", "row 3 was dropped",
    ]  # fmt: skip
    assert "'text' takes 42 bytes as JSON; an embed request holds 40" in validation.warnings[0]
