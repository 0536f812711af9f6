"""Cohere's datasets and embed jobs driven by Cohere's own client (``cohere.Client``: ``datasets.create``, ``wait``,
``embed_jobs.create``, ``utils.save_dataset``, ...) against a real server with a data folder. The oracle for an
embed job's output is the online ``/v1/embed`` route (itself checked against sentence-transformers in
``test_cohere_embed.py``): each row's embeddings are what ``co.embed`` answers for its text."""

from __future__ import annotations

import io
import json
import shutil
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import httpx
import numpy as np
import openai
import pytest

from tests.service.apptools import free_port, real_server_for
from tests.service.test_batch_resume import service_process

cohere = pytest.importorskip("cohere")
st = pytest.importorskip("sentence_transformers")

from model_export.export import export_bundle  # noqa: E402
from model_export.family_checkpoints import build_family_checkpoint  # noqa: E402

pytestmark = pytest.mark.timeout(300)
KEY, OTHER_KEY = "key-one", "key-two"
TEXTS = ["A man is eating food.", "The team won the game in Paris.", "my dog runs to the park", "She writes about it."]
CALIBRATION = [f"{who} {what}" for who in ("a man", "the team", "my dog", "she") for what in ("runs", "eats", "writes")]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("embed-jobs")
    encoder = build_family_checkpoint("bert", "feature-extraction", root / "encoder")
    checkpoint = root / "checkpoint"
    st.SentenceTransformer(str(encoder), device="cpu").save(str(checkpoint))
    texts = root / "calibration.txt"
    texts.write_text("\n".join(CALIBRATION) + "\n")
    return export_bundle(checkpoint, root / "bundle", task="feature-extraction", embedding_calibration=texts).path


@pytest.fixture(scope="module")
def server(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data, uncalibrated = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("uncalibrated") / "bundle"
    shutil.copytree(bundle, uncalibrated)
    spec = json.loads((uncalibrated / "bundle.json").read_text())
    (uncalibrated / "bundle.json").write_text(json.dumps({**spec, "embedding_ranges": []}))
    bundles = {"embed": bundle, "uncalibrated": uncalibrated}
    with real_server_for(bundles, data_dir=data, batch_chunk_lines=4, api_keys=[KEY, OTHER_KEY]) as url:
        yield url


def client(url: str, key: str = KEY) -> Any:
    return cohere.Client(api_key=key, base_url=url, timeout=30)


def jsonl(rows: list[Any]) -> bytes:
    return b"".join((row if isinstance(row, bytes) else json.dumps(row).encode()) + b"\n" for row in rows)


def saved_rows(co: Any, dataset: Any, tmp_path: Path) -> list[dict[str, Any]]:
    """The dataset's rows as the client saves them (it downloads the parts' Avro at their signed URLs)."""
    target = tmp_path / f"{dataset.id}.jsonl"
    co.utils.save_dataset(dataset, str(target), format="jsonl")
    return [json.loads(line) for line in target.read_text().splitlines()]


def wait_for(co: Any, job_id: str, statuses: tuple[str, ...], timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while (job := co.embed_jobs.get(job_id)).status not in statuses:
        assert time.monotonic() < deadline, f"embed job still {job.status}"
        time.sleep(0.05)
    return job


def test_an_embed_job_answers_each_row_as_the_embed_route_does(server: str, tmp_path: Path) -> None:
    co = client(server)
    rows = [{"text": text, "id": n, "lang": "en", "dropped": "x"} for n, text in enumerate(TEXTS)]
    del rows[2]["lang"]
    created = co.datasets.create(
        name="Reviews 2026", type="embed-input", data=("reviews.jsonl", jsonl(rows)),
        keep_fields=["id"], optional_fields=["lang"],
    )  # fmt: skip
    dataset = co.wait(created).dataset
    assert (dataset.validation_status, dataset.dataset_type, dataset.preserve_fields) == (
        "validated", "embed-input", ["id", "lang"],
    )  # fmt: skip
    assert dataset.id.startswith("reviews-2026-") and dataset.dataset_parts[0].num_rows == len(TEXTS)
    assert [row["text"] for row in saved_rows(co, dataset, tmp_path)] == TEXTS

    types = ["float", "int8", "ubinary", "base64"]
    job = co.embed_jobs.create(model="embed", dataset_id=dataset.id, input_type="search_document",
                               embedding_types=types, name="nightly")  # fmt: skip
    done = co.wait(job)
    assert (done.status, done.input_dataset_id, done.model, done.truncate) == ("complete", dataset.id, "embed", "END")
    output = co.datasets.get(done.output_dataset_id).dataset
    assert (output.dataset_type, output.name, output.validation_warnings) == ("embed-result", "nightly-output", [])
    got = saved_rows(co, output, tmp_path)
    assert [(row["text"], row["id"], row["lang"]) for row in got] == [
        (text, n, None if n == 2 else "en") for n, text in enumerate(TEXTS)
    ]
    assert all("dropped" not in row for row in got)
    online = co.embed(texts=TEXTS, model="embed", input_type="search_document", embedding_types=types).embeddings
    np.testing.assert_allclose([row["embeddings"]["float"] for row in got], online.float_, atol=1e-5)
    assert np.abs(np.array([row["embeddings"]["int8"] for row in got]) - np.array(online.int8)).max() <= 1
    bits = np.unpackbits(np.array([row["embeddings"]["ubinary"] for row in got], dtype=np.uint8))
    assert (bits == np.unpackbits(np.array(online.ubinary, dtype=np.uint8))).mean() >= 0.99
    assert all(isinstance(row["embeddings"]["base64"], str) for row in got)
    listed = co.embed_jobs.list().embed_jobs
    assert done.job_id in [item.job_id for item in listed]
    batches = openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0)
    assert batches.batches.list().data == [] and batches.files.list().data == []  # a job's batch is not OpenAI's


def test_csv_txt_and_avro_uploads_and_dropped_rows(server: str, tmp_path: Path) -> None:
    co = client(server)
    csv_rows = b"text;topic\n" + b"".join(f"{text};t{n}\n".encode() for n, text in enumerate(TEXTS))
    created = co.datasets.create(name="csv", type="embed-input", data=("rows.csv", csv_rows), csv_delimiter=";",
                                 keep_fields="topic")  # fmt: skip
    got = saved_rows(co, co.wait(created).dataset, tmp_path)
    assert got == [{"text": text, "topic": f"t{n}"} for n, text in enumerate(TEXTS)]

    text_file = "\n--\n".join(TEXTS).encode()
    created = co.datasets.create(name="txt", type="embed-input", data=("rows.txt", text_file), text_separator="\n--\n")
    assert [row["text"] for row in saved_rows(co, co.wait(created).dataset, tmp_path)] == TEXTS

    avro = io.BytesIO()
    schema = {
        "type": "record",
        "name": "Row",
        "fields": [{"name": "text", "type": "string"}, {"name": "n", "type": "long"}],
    }
    fastavro.writer(avro, fastavro.parse_schema(schema), [{"text": text, "n": n} for n, text in enumerate(TEXTS)])
    created = co.datasets.create(name="avro", type="embed-input", data=("rows.avro", avro.getvalue()), keep_fields="n")
    assert saved_rows(co, co.wait(created).dataset, tmp_path) == [{"text": t, "n": n} for n, t in enumerate(TEXTS)]
    damaged = co.datasets.create(name="bad", type="embed-input", data=("rows.avro", avro.getvalue()[:-9]))
    assert co.datasets.get(damaged.id).dataset.validation_error == "the Avro file cannot be read: ValueError"

    rows = [b"{not json", {"text": ""}, {"text": 5}, {"text": TEXTS[0]}, {"other": "x"}]
    created = co.datasets.create(name="messy", type="embed-input", data=("rows.jsonl", jsonl(rows)),
                                 skip_malformed_input=True)  # fmt: skip
    dataset = co.wait(created).dataset
    assert dataset.dataset_parts[0].num_rows == 1
    assert [warning.split(":")[0] for warning in dataset.validation_warnings] == [
        "row 1 was dropped", "row 2 was dropped", "row 3 was dropped", "row 5 was dropped",
    ]  # fmt: skip

    created = co.datasets.create(name="strict", type="embed-input", data=("rows.jsonl", jsonl(rows)))
    failed = co.datasets.get(created.id).dataset
    assert failed.validation_status == "failed" and failed.validation_error.startswith("row 1: it is not JSON")
    with pytest.raises(Exception, match="failed with status failed"):
        co.wait(created)
    assert co.datasets.get(co.datasets.create(name="x", type="embed-input", data=("rows.xml", b"<a/>")).id).dataset \
        .validation_error.startswith("the file's name ends .xml")  # fmt: skip
    failed_ids = {dataset.id for dataset in co.datasets.list(validation_status="failed").datasets}
    assert {created.id, damaged.id} <= failed_ids
    assert all(
        dataset.validation_status == "failed" for dataset in co.datasets.list(validation_status="failed").datasets
    )
    assert all(
        dataset.dataset_type == "embed-result" for dataset in co.datasets.list(dataset_type="embed-result").datasets
    )


def test_refusals_name_what_is_wrong(server: str) -> None:
    co = client(server)
    with pytest.raises(cohere.core.ApiError) as refused:
        co.datasets.create(name="ft", type="reranker-finetune-input", data=("rows.jsonl", jsonl([{"text": "a"}])))
    assert refused.value.status_code == 400 and "embed-input" in str(refused.value.body)
    with pytest.raises(cohere.core.ApiError) as refused:
        co.datasets.create(name="ft", type="embed-input", data=("r.jsonl", b'{"text": "a"}\n'), keep_fields="bad-name")
    assert refused.value.status_code == 400 and "bad-name" in str(refused.value.body)
    with pytest.raises(cohere.core.ApiError) as refused:
        co.embed_jobs.create(model="embed", dataset_id="no-such-dataset", input_type="clustering")
    assert refused.value.status_code == 404
    keyed = {"Authorization": f"Bearer {KEY}"}
    flag = httpx.post(f"{server}/v1/datasets", params={"name": "n", "type": "embed-input", "skip_malformed_input": "1"},
                      files={"data": ("r.jsonl", b'{"text": "a"}')}, headers=keyed)  # fmt: skip
    assert flag.status_code == 400 and "skip_malformed_input must be true or false" in flag.text
    assert httpx.get(f"{server}/v1/datasets", params={"offset": 1 << 70}, headers=keyed).status_code == 422
    huge = co.datasets.create(name="huge", type="embed-input", data=("r.jsonl", jsonl([{"text": "a" * (1 << 20)}])))
    failed = co.datasets.get(huge.id).dataset  # no embed request within max_body_bytes could carry it
    assert failed.validation_status == "failed" and "an embed request holds 1047552" in failed.validation_error
    dataset = co.datasets.create(name="ok", type="embed-input", data=("r.jsonl", jsonl([{"text": "a"}])))
    with pytest.raises(cohere.core.ApiError) as refused:
        co.embed_jobs.create(model="nope", dataset_id=dataset.id, input_type="clustering")
    assert refused.value.status_code == 404 and "nope" in str(refused.value.body)
    with pytest.raises(cohere.core.ApiError) as refused:  # texts only
        co.embed_jobs.create(model="embed", dataset_id=dataset.id, input_type="image")
    assert refused.value.status_code == 422
    with pytest.raises(cohere.core.ApiError) as refused:
        co.embed_jobs.create(
            model="uncalibrated", dataset_id=dataset.id, input_type="clustering", embedding_types=["int8"]
        )
    assert refused.value.status_code == 400 and "--embedding-calibration" in str(refused.value.body)
    assert all(job.input_dataset_id != dataset.id for job in co.embed_jobs.list().embed_jobs)  # none was made


def test_cancel_and_delete_and_keys(server: str) -> None:
    co, other = client(server), client(server, OTHER_KEY)
    rows = [{"text": f"{TEXTS[n % 4]} number {n}"} for n in range(3000)]
    dataset = co.datasets.create(name="big", type="embed-input", data=("big.jsonl", jsonl(rows)))
    job = co.embed_jobs.create(model="embed", dataset_id=dataset.id, input_type="clustering")
    with pytest.raises(cohere.core.ApiError) as refused:  # the client retries a 409 unless told not to
        co.datasets.delete(dataset.id, request_options={"max_retries": 0})
    assert refused.value.status_code == 409 and job.job_id in str(refused.value.body)
    co.embed_jobs.cancel(job.job_id)
    cancelled = wait_for(co, job.job_id, ("cancelled",))
    assert cancelled.output_dataset_id is None
    for call in (lambda: other.datasets.get(dataset.id), lambda: other.embed_jobs.get(job.job_id)):
        with pytest.raises(cohere.core.ApiError) as refused:
            call()
        assert refused.value.status_code == 404
    assert dataset.id not in [item.id for item in other.datasets.list().datasets]
    usage = co.datasets.get_usage().organization_usage
    assert usage >= co.datasets.get(dataset.id).dataset.dataset_parts[0].size_bytes > 0
    url = co.datasets.get(dataset.id).dataset.dataset_parts[0].url
    assert httpx.get(url).status_code == 200  # no key: the signature is the credential
    assert httpx.get(url.replace("signature=", "signature=0")).status_code == 404
    assert httpx.get(url.split("signature=")[0] + "signature=é").status_code == 404  # found by fuzzing: was a 500
    co.datasets.delete(dataset.id)
    assert httpx.get(url).status_code == 404
    assert co.datasets.get_usage().organization_usage < usage


def committed_lines(data_dir: Path) -> tuple[int, int]:
    """The job's batch: lines committed, lines in all (16 rows a line)."""
    with sqlite3.connect(data_dir / "batches.sqlite3") as db:
        found = db.execute("SELECT done_lines, total FROM batches").fetchone()
    return (0, 0) if found is None else (int(found[0]), int(found[1]))


def test_an_embed_job_killed_mid_way_resumes_and_embeds_every_row_once(bundle: Path, tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    co = cohere.Client(api_key="unused", base_url=f"http://127.0.0.1:{port}", timeout=30)
    texts = [f"{TEXTS[n % 4]} number {n}" for n in range(3000)]
    rows = jsonl([{"text": text, "n": n} for n, text in enumerate(texts)])
    with service_process(bundle, data_dir, port, name="embed") as first:
        dataset = co.datasets.create(name="resume", type="embed-input", data=("rows.jsonl", rows), keep_fields="n")
        job = co.embed_jobs.create(model="embed", dataset_id=dataset.id, input_type="clustering")
        deadline = time.monotonic() + 60
        while committed_lines(data_dir)[0] < 16:  # two chunks of 8 lines
            assert time.monotonic() < deadline
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    done, total = committed_lines(data_dir)
    assert total == len(texts) // 16 + 1 and done < total, "the job finished before the kill: make it longer"
    with service_process(bundle, data_dir, port, name="embed"):
        done = wait_for(co, job.job_id, ("complete",), timeout_s=120)
        got = saved_rows(co, co.datasets.get(done.output_dataset_id).dataset, tmp_path)
        assert [(row["n"], row["text"]) for row in got] == list(enumerate(texts))
        for start in range(0, len(texts), 96):
            online = co.embed(texts=texts[start : start + 96], model="embed", input_type="clustering").embeddings
            vectors = [row["embeddings"]["float"] for row in got[start : start + 96]]
            np.testing.assert_allclose(vectors, online, atol=1e-5)


def test_the_readme_example_runs(
    bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.service.readme_examples import readme_example

    monkeypatch.chdir(tmp_path)
    with real_server_for({"minilm": bundle}, data_dir=tmp_path / "data") as url:
        exec(compile(readme_example("cohere-embed-job", url), "README:cohere-embed-job", "exec"), {})
    printed = [line for line in capsys.readouterr().out.splitlines() if line != "..."]  # wait() prints "..."
    assert printed[0] == "complete"
    assert [line.split()[0] for line in printed[1:]] == ["1", "2"] and printed[1].endswith(" 32")
