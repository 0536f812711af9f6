"""The OpenAI Batch API (/v1/files, /v1/batches) driven by the official ``openai`` client against a real server:
the whole cycle, each line's answer equal to the online route's, bad lines in the error file, cancelling, limits,
and API-key isolation."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.service.apptools import real_server_for
from tests.service.tiny_models import TinyModel

pytestmark = pytest.mark.timeout(300)
SENTENCES = ["I loved this film.", "Terrible service, never again.", "It was fine.", "What a day!"]


def client_for(url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def jsonl(lines: list[Any]) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


def request_line(custom_id: str, body: Any, url: str = "/v1/text-classification") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def create_batch(client: openai.OpenAI, file_id: str, **options: Any) -> Any:
    """A text-classification batch of ``file_id`` (the client's endpoint type lists only OpenAI's own)."""
    endpoint: Any = "/v1/text-classification"
    return client.batches.create(input_file_id=file_id, endpoint=endpoint, completion_window="24h", **options)


def wait_until_finished(client: openai.OpenAI, batch_id: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(0.05)


def entries(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


@pytest.fixture(scope="module")
def server(tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("batch-data")
    bundles = {"sentiment": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, data_dir=data, batch_chunk_lines=4, max_body_bytes=4096) as url:
        yield url


def test_the_openai_client_runs_a_batch_whose_answers_are_the_online_routes(server: str) -> None:
    client = client_for(server)
    bodies = [{"inputs": text} for text in SENTENCES] + [{"inputs": SENTENCES[:2], "top_k": None}]
    lines: list[Any] = [request_line(f"ok-{n}", body) for n, body in enumerate(bodies)]
    lines += [
        b"{not json",
        request_line("wrong-url", {"inputs": "x"}, url="/v1/fill-mask"),
        request_line("invalid", {"inputs": 5}),
        request_line("ok-0", {"inputs": "a repeated custom_id"}),
        request_line("too-big", {"inputs": "word " * 2000}),
        {"method": "POST", "url": "/v1/text-classification", "body": {"inputs": "no id"}},
    ]
    uploaded = client.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    assert (uploaded.object, uploaded.purpose, uploaded.bytes) == ("file", "batch", len(jsonl(lines)))
    assert client.files.retrieve(uploaded.id).filename == "requests.jsonl"
    assert client.files.content(uploaded.id).content == jsonl(lines)

    created = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/text-classification",  # type: ignore[arg-type]
        completion_window="24h",
        metadata={"job": "nightly"},
    )
    assert (created.status, created.metadata) == ("validating", {"job": "nightly"})
    assert created.expires_at == created.created_at + 24 * 3600
    batch = wait_until_finished(client, created.id)
    assert batch.status == "completed"
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (11, 5, 6)
    assert batch.in_progress_at is not None and batch.finalizing_at is not None and batch.completed_at is not None
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at

    output = entries(client, batch.output_file_id)
    assert sorted(entry["custom_id"] for entry in output) == [f"ok-{n}" for n in range(5)]
    for entry in output:
        body = bodies[int(entry["custom_id"].removeprefix("ok-"))]
        online = httpx.post(f"{server}/v1/text-classification", json=body)
        assert entry["error"] is None and entry["id"].startswith("batch_req_")
        assert entry["response"]["status_code"] == 200
        assert entry["response"]["body"] == online.json()

    errors = {entry["custom_id"]: entry for entry in entries(client, batch.error_file_id)}
    assert errors["wrong-url"]["error"]["code"] == "invalid_url" and errors["wrong-url"]["response"] is None
    invalid = errors["invalid"]["response"]
    online = httpx.post(f"{server}/v1/text-classification", json={"inputs": 5})
    assert (invalid["status_code"], invalid["body"]) == (online.status_code, online.json()) == (422, online.json())
    assert errors["ok-0"]["error"]["code"] == "duplicate_custom_id"
    assert errors["too-big"]["response"]["status_code"] == 413
    unnamed = [entry for entry in entries(client, batch.error_file_id) if entry["custom_id"] is None]
    assert sorted(entry["error"]["code"] for entry in unnamed) == ["invalid_json_line", "invalid_request"]

    assert created.id in [listed.id for listed in client.batches.list(limit=5)]
    names = {file.id: file.purpose for file in client.files.list()}
    assert names[uploaded.id] == "batch" and names[batch.output_file_id] == "batch_output"
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)
    assert client.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(uploaded.id)


def test_batches_list_pages_with_after_and_limit(server: str) -> None:
    client = client_for(server)
    uploaded = client.files.create(file=("one.jsonl", jsonl([request_line("a", {"inputs": "x"})])), purpose="batch")
    made = [create_batch(client, uploaded.id) for _ in range(3)]
    first = client.batches.list(limit=2)
    assert [batch.id for batch in first.data] == [made[2].id, made[1].id] and first.has_more
    second = client.batches.list(limit=2, after=first.data[-1].id)
    assert second.data[0].id == made[0].id
    for batch in made:
        assert wait_until_finished(client, batch.id).status == "completed"


def test_a_cancelled_batch_keeps_what_it_answered_and_stops(server: str) -> None:
    client = client_for(server)
    lines = [request_line(f"n{n}", {"inputs": SENTENCES[n % 4]}) for n in range(3000)]
    uploaded = client.files.create(file=("many.jsonl", jsonl(lines)), purpose="batch")
    created = client.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/text-classification",  # type: ignore[arg-type]
        completion_window="24h",
    )
    with pytest.raises(openai.ConflictError):  # the input of a running batch stays
        client.files.delete(uploaded.id)
    cancelling = client.batches.cancel(created.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    batch = wait_until_finished(client, created.id)
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    assert batch.request_counts is not None and batch.request_counts.completed < 3000
    output = entries(client, batch.output_file_id)
    assert len(output) == batch.request_counts.completed


def test_the_batch_endpoint_and_the_body_are_checked(server: str) -> None:
    client = client_for(server)
    with pytest.raises(openai.BadRequestError, match="cannot be batched"):
        client.batches.create(input_file_id="file-x", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        client.batches.create(input_file_id="file-x", endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_nope")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("a.jsonl", b"{}\n"), purpose="fine-tune")


def test_limits_answer_with_the_setting_they_break(tiny_models: dict[str, TinyModel], tmp_path: Path) -> None:
    bundles = {"sentiment": tiny_models["text-classification"].bundle}
    limits = {"batch_max_file_bytes": 400, "batch_max_file_lines": 3, "batch_max_jobs_in_flight": 1}
    with real_server_for(bundles, data_dir=tmp_path, **limits) as url:
        client = client_for(url)
        with pytest.raises(openai.APIStatusError, match="batch_max_file_bytes") as large:
            client.files.create(file=("big.jsonl", b"x" * 401), purpose="batch")
        assert large.value.status_code == 413
        four = jsonl([request_line(f"n{n}", {"inputs": "x"}) for n in range(4)])
        with pytest.raises(openai.APIStatusError, match="batch_max_file_lines"):
            client.files.create(file=("four.jsonl", four), purpose="batch")
        many = jsonl([request_line(f"n{n}", {"inputs": "x"}) for n in range(3)])
        uploaded = client.files.create(file=("three.jsonl", many), purpose="batch")
        first = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/text-classification", completion_window="24h"
        )  # type: ignore[arg-type]
        if client.batches.retrieve(first.id).status not in ("completed",):
            with pytest.raises(openai.RateLimitError, match="batch_max_jobs_in_flight"):
                client.batches.create(
                    input_file_id=uploaded.id, endpoint="/v1/text-classification", completion_window="24h"
                )  # type: ignore[arg-type]
        assert wait_until_finished(client, first.id).status == "completed"
    with (
        real_server_for(bundles, data_dir=tmp_path, batch_max_stored_bytes=len(many) + 10) as url,
        pytest.raises(openai.APIStatusError, match="batch_max_stored_bytes"),
    ):
        client_for(url).files.create(file=("three.jsonl", many), purpose="batch")


def test_each_api_key_sees_only_its_own_files_and_batches(tiny_models: dict[str, TinyModel], tmp_path: Path) -> None:
    bundles = {"sentiment": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, data_dir=tmp_path, api_keys=["key-alpha-secret", "key-beta-secret"]) as url:
        alpha, beta = client_for(url, "key-alpha-secret"), client_for(url, "key-beta-secret")
        uploaded = alpha.files.create(file=("a.jsonl", jsonl([request_line("a", {"inputs": "x"})])), purpose="batch")
        batch = alpha.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/text-classification", completion_window="24h"
        )  # type: ignore[arg-type]
        for call in (
            lambda: beta.files.retrieve(uploaded.id),
            lambda: beta.files.content(uploaded.id),
            lambda: beta.files.delete(uploaded.id),
            lambda: beta.batches.retrieve(batch.id),
            lambda: beta.batches.cancel(batch.id),
            lambda: beta.batches.create(
                input_file_id=uploaded.id, endpoint="/v1/text-classification", completion_window="24h"
            ),  # type: ignore[arg-type]
        ):
            with pytest.raises(openai.NotFoundError):
                call()
        assert beta.files.list().data == [] and beta.batches.list().data == []
        finished = wait_until_finished(alpha, batch.id)
        assert finished.status == "completed"
        assert {file.id for file in alpha.files.list()} == {uploaded.id, finished.output_file_id}
        with pytest.raises(openai.NotFoundError):
            beta.files.content(str(finished.output_file_id))
        with pytest.raises(openai.AuthenticationError):
            client_for(url, "wrong").batches.list()
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("batches.sqlite3*"))
    assert b"key-alpha-secret" not in stored and b"key-beta-secret" not in stored
    with sqlite3.connect(tmp_path / "batches.sqlite3") as db:
        assert {row[0] for row in db.execute("SELECT owner FROM batches")} == {
            __import__("hashlib").sha256(b"key-alpha-secret").hexdigest()
        }


def test_the_batch_api_is_off_without_a_data_dir(tiny_models: dict[str, TinyModel]) -> None:
    with real_server_for({"sentiment": tiny_models["text-classification"].bundle}) as url:
        with pytest.raises(openai.NotFoundError, match="data-dir"):
            client_for(url).batches.list()
        with pytest.raises(openai.NotFoundError, match="data-dir"):
            client_for(url).files.create(file=("a.jsonl", b"{}\n"), purpose="batch")


def test_the_readme_batch_example_runs(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.service.readme_examples import readme_example

    exec(compile(readme_example("openai-batch", server), "README:openai-batch", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("completed") and "completed=3" in printed[0]
    assert [line.split()[:2] for line in printed[1:]] == [[f"review-{n}", "200"] for n in range(3)]


def test_cohere_classify_lines_answer_as_the_online_route(server: str) -> None:
    """Cohere's /v1/classify reads its body with its own decoder (the model's score function): a batch line does too."""
    client = client_for(server)
    bodies = [{"model": "sentiment", "inputs": SENTENCES[:2]}, {"inputs": [SENTENCES[2]]}]
    lines = [request_line(f"c{n}", body, url="/v1/classify") for n, body in enumerate(bodies)]
    uploaded = client.files.create(file=("classify.jsonl", jsonl(lines)), purpose="batch")
    endpoint: Any = "/v1/classify"
    batch = client.batches.create(input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h")
    done = wait_until_finished(client, batch.id)
    answers = {entry["custom_id"]: entry["response"]["body"] for entry in entries(client, done.output_file_id)}
    for n, body in enumerate(bodies):
        online = httpx.post(f"{server}/v1/classify", json=body).json()
        for answer in (online, answers[f"c{n}"]):  # each answer and classification has an id of its own
            answer.pop("id")
            for item in answer["classifications"]:
                item.pop("id")
        assert answers[f"c{n}"] == online
