"""The edges of the API (issue 15): one rule for long inputs, the in-flight cap, request-format errors,
QA score aggregation, and broken bundles at start-up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.__main__ import main
from service.settings import Settings
from tests.service.apptools import gate_engine, ready_app_client, serving, wait_for
from tests.service.test_api import assert_error
from tests.service.tiny_models import TinyModel

MEGABYTE_TEXT = ("the river flows through the old city towards the mountains " * 20000)[:1_000_000]
LONG_REVIEW = "the plot was boring but the music was great and the actors were good " * 30  # > 128 tokens
QA_CONTEXT = "john smith lives in paris with his family and works in london. " * 40


def big_bodies() -> dict[str, dict[str, Any]]:
    return {
        "/v1/text-classification": {"inputs": MEGABYTE_TEXT},
        "/v1/token-classification": {"inputs": MEGABYTE_TEXT},
        "/v1/question-answering": {"inputs": {"question": "where does john live?", "context": MEGABYTE_TEXT}},
        "/v1/fill-mask": {"inputs": "[MASK] " + MEGABYTE_TEXT},
        "/v1/zero-shot-classification": {"inputs": MEGABYTE_TEXT, "candidate_labels": ["travel", "music"]},
        "/v1/rerank": {"query": "where is the river?", "documents": [MEGABYTE_TEXT]},
    }


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel]) -> Iterator[TestClient]:
    settings = Settings(models=[f"{task}={model.bundle}" for task, model in tiny_models.items()], intra_op_threads=1)
    with ready_app_client(settings) as test_client:
        yield test_client


@pytest.mark.parametrize("route", list(big_bodies()))
def test_a_megabyte_text_is_413_within_a_second_on_every_task_route(client: TestClient, route: str) -> None:
    started = time.perf_counter()
    response = client.post(route, json=big_bodies()[route])
    elapsed = time.perf_counter() - started
    assert_error(response, 413, "payload_too_large", "16384 tokens", "max_request_tokens", "characters")
    assert elapsed < 1.0, f"{route} took {elapsed:.2f} s"


def test_windowed_tasks_keep_their_windows_under_the_cap(client: TestClient) -> None:
    qa = client.post("/v1/question-answering", json={"inputs": {"question": "where?", "context": QA_CONTEXT}})
    assert qa.status_code == 200, qa.text
    ner = client.post("/v1/token-classification", json={"inputs": QA_CONTEXT})
    assert ner.status_code == 200, ner.text


def test_an_over_length_classification_input_is_400_truncated_or_chunked(client: TestClient) -> None:
    route = "/v1/text-classification"
    refused = client.post(route, json={"inputs": ["fine", LONG_REVIEW]})
    assert_error(refused, 400, "bad_request", "input 1 is", "tokens long", "at most 128", '"truncation": true')
    cut = client.post(route, json={"inputs": LONG_REVIEW, "truncation": True, "top_k": None})
    assert cut.status_code == 200, cut.text
    head = " ".join(LONG_REVIEW.split()[:200])  # also more than 128 tokens: cut to the same 128
    same_cut = client.post(route, json={"inputs": head, "truncation": True, "top_k": None}).json()["results"]
    assert cut.json()["results"] == same_cut
    chunked = client.post(route, json={"inputs": LONG_REVIEW, "long_text": "chunk", "top_k": None})
    assert chunked.status_code == 200, chunked.text
    (labels,) = chunked.json()["results"]
    assert sum(item["score"] for item in labels) == pytest.approx(1.0, abs=1e-5)
    assert labels != cut.json()["results"][0]  # the other windows count too
    short = client.post(route, json={"inputs": "fine", "long_text": "chunk", "top_k": None}).json()
    assert short == client.post(route, json={"inputs": "fine", "top_k": None}).json()
    both = client.post(route, json={"inputs": "fine", "long_text": "chunk", "truncation": True})
    assert_error(both, 400, "bad_request", "exclude")


def test_request_format_errors_are_clear(client: TestClient) -> None:
    route = "/v1/text-classification"
    broken = client.post(route, content=b'{"inputs": "fine",, }', headers={"content-type": "application/json"})
    assert_error(broken, 400, "bad_request", "not valid JSON", "at character 18")
    form = client.post(
        route, content=b'{"inputs": "fine"}', headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert_error(form, 415, "unsupported_media_type", "Content-Type: application/json", "form-urlencoded")
    bare = client.post(route, content=b'{"inputs": "fine"}', headers={"content-type": ""})
    assert_error(bare, 415, "unsupported_media_type", "Content-Type: application/json", "none was sent")
    slash = client.post(route + "/", json={"inputs": "fine"}, follow_redirects=False)
    assert_error(slash, 404, "not_found")
    assert_error(client.get("/v1/models/", follow_redirects=False), 404, "not_found")


def test_qa_scores_sum_over_windows_by_default_and_max_keeps_a_probability(client: TestClient) -> None:
    body: dict[str, Any] = {
        "inputs": {"question": "where does john live?", "context": QA_CONTEXT},
        "top_k": 5,
        "max_seq_len": 48,
        "doc_stride": 16,
    }
    summed = client.post("/v1/question-answering", json=body).json()["results"][0]
    kept = client.post("/v1/question-answering", json={**body, "score_aggregation": "max"}).json()["results"][0]
    assert all(0.0 <= answer["score"] <= 1.0 for answer in kept)
    best_kept = {answer["answer"].lower(): answer["score"] for answer in kept}
    merged = [answer for answer in summed if answer["answer"].lower() in best_kept]
    assert merged and all(answer["score"] >= best_kept[answer["answer"].lower()] - 1e-6 for answer in merged)
    assert any(answer["score"] > best_kept[answer["answer"].lower()] + 1e-6 for answer in merged)  # windows added
    refused = client.post("/v1/question-answering", json={**body, "score_aggregation": "mean"})
    assert_error(refused, 422, "validation_error", "score_aggregation")


def test_requests_over_the_in_flight_cap_get_429_at_once(text_classification_model: TinyModel) -> None:
    settings = Settings(
        models=[f"sst={text_classification_model.bundle}"],
        intra_op_threads=1,
        model_workers=1,
        max_batch_size=1,
        max_concurrent_requests=2,
    )
    route = "/v1/text-classification"

    async def main() -> None:
        async with serving(settings) as (app, client):
            engine = app.state.registry.engines["sst"]
            runner, gate = gate_engine(engine)
            held = [asyncio.ensure_future(client.post(route, json={"inputs": text})) for text in ("one", "two")]
            await wait_for(runner.entered.is_set)
            await wait_for(lambda: engine.batcher.queue_depth == 1)
            started = time.perf_counter()
            refused = await client.post(route, content=b"not even json", headers={"content-type": "application/json"})
            assert time.perf_counter() - started < 0.5
            assert_error(refused, 429, "overloaded", "2 requests in flight", "max_concurrent_requests")
            assert int(refused.headers["retry-after"]) >= 1
            assert (await client.get("/health/ready")).status_code == 200  # probes are not counted
            gate.set()
            assert [response.status_code for response in await asyncio.gather(*held)] == [200, 200]
            await asyncio.sleep(int(refused.headers["retry-after"]))  # as asked: the door keeps Retry-After
            assert (await client.post(route, json={"inputs": "three"})).status_code == 200  # permits came back

    asyncio.run(main())


def write_broken_bundle(folder: Path) -> Path:
    folder.mkdir()
    (folder / "bundle.json").write_text("{not json")
    (folder / "model.onnx").write_bytes(b"")
    return folder


def test_a_broken_bundle_stops_start_up_naming_it(
    text_classification_model: TinyModel, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = write_broken_bundle(tmp_path / "broken")
    code = main(["--model", f"good={text_classification_model.bundle}", "--model", f"bad={broken}", "--port", "0"])
    assert code == 1
    error = capsys.readouterr().err
    assert "cannot serve model bad" in error and "--skip-broken" in error


def test_skip_broken_serves_the_rest_and_lists_the_broken_one(
    text_classification_model: TinyModel, tmp_path: Path
) -> None:
    broken = write_broken_bundle(tmp_path / "broken")
    models = [f"good={text_classification_model.bundle}", f"bad={broken}"]
    settings = Settings(models=models, intra_op_threads=1, skip_broken=True)

    async def main() -> None:
        async with serving(settings) as (_, client):
            listed = (await client.get("/v1/models")).json()
            assert [card["name"] for card in listed["models"]] == ["good"]
            assert [item["name"] for item in listed["broken"]] == ["bad"]
            assert listed["broken"][0]["reason"] == "missing tokenizer.json"
            assert str(tmp_path) not in listed["broken"][0]["reason"]  # no server paths in the answer
            answer = await client.post("/v1/text-classification", json={"inputs": "fine"})
            assert answer.status_code == 200 and answer.json()["model"] == "good"

    asyncio.run(main())
