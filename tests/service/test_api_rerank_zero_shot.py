"""Rerank (``/v1/rerank``, TEI's ``/rerank``) and zero-shot classification over HTTP, against transformers.

The service runs the exported tiny bundles; the oracle runs their checkpoints in torch: rerank scores are
``sigmoid(logit)`` of the same (query, document) pairs tokenized the same way (document side truncated), zero-shot
answers are the zero-shot-classification pipeline's. Scores agree within 1e-4, orders exactly.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.service.tiny_models import MAX_LENGTH, NLI_LABELS, RERANK_LABELS, TinyModel

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from fastapi.testclient import TestClient  # noqa: E402

from service.app import create_app  # noqa: E402
from service.engine import Engine  # noqa: E402
from service.settings import Settings  # noqa: E402
from service.tasks import ZeroShotParams  # noqa: E402

TOLERANCE = 1e-4
TIE_TOLERANCE = 1e-6  # ORT and torch round differently; items this close may come in either order
QUERY = "where does john smith live?"
DOCUMENTS = [
    "the movie was wonderful, the actors were brilliant.",
    "john smith lives in paris and works for the united nations.",
    "  Café naïve — 東京 🙂 ",
    "paris",
    "a very long page " + "that keeps going about the river, the old city and the mountains " * 20,
]
SEQUENCES = [
    "the movie was wonderful, the actors were brilliant and the music was beautiful.",
    "john smith lives in paris and works for the united nations.",
    "a long review " + "that keeps going about the plot, the actors and the music " * 20,
]
LABELS = ["film", "city", "music", "money"]
MAX_INPUTS = 8


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, TinyModel]) -> dict[str, TinyModel]:
    return {task: tiny_models[task] for task in ("rerank", "zero-shot-classification", "text-classification")}


@pytest.fixture(scope="module")
def client(served: dict[str, TinyModel]) -> Iterator[TestClient]:
    settings = Settings(
        models=[f"{task}={model.bundle}" for task, model in served.items()],
        max_inputs_per_request=MAX_INPUTS,
        intra_op_threads=1,
        max_wait_ms=1.0,
    )  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as test_client:
        deadline = time.monotonic() + 30
        while test_client.get("/health/ready").status_code != 200:
            assert time.monotonic() < deadline, "service never became ready"
            time.sleep(0.02)
        yield test_client


@pytest.fixture(scope="module")
def relevance_oracle(served: dict[str, TinyModel]) -> Any:
    checkpoint = served["rerank"].checkpoint
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()

    def logits(query: str, documents: list[str]) -> np.ndarray:
        values = []
        for document in documents:
            encoded = tokenizer(query, document, truncation="only_second", max_length=MAX_LENGTH, return_tensors="pt")
            with torch.no_grad():
                values.append(float(model(**encoded).logits[0, 0]))
        return np.array(values, dtype=np.float64)

    return logits


@pytest.fixture(scope="module")
def zero_shot_pipeline(served: dict[str, TinyModel]) -> Any:
    checkpoint = str(served["zero-shot-classification"].checkpoint)
    return transformers.pipeline("zero-shot-classification", model=checkpoint, tokenizer=checkpoint, device="cpu")


def assert_error(response: Any, status: int, error_type: str, *words: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"]["type"] == error_type, body
    for word in words:
        assert word in body["error"]["message"], body


def sigmoid(values: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-values))


def assert_ranked_like(order: list[Any], expected: dict[Any, float]) -> None:
    """``order`` (keys, best first) is the oracle's order, up to keys whose oracle scores tie."""
    assert sorted(order, key=str) == sorted(expected, key=str)
    for better, worse in itertools.pairwise(order):
        assert expected[better] >= expected[worse] - TIE_TOLERANCE, (order, expected)


def test_models_lists_the_new_tasks(client: TestClient) -> None:
    cards = {card["name"]: card for card in client.get("/v1/models").json()["models"]}
    assert cards["rerank"]["task"] == "rerank" and cards["rerank"]["labels"] == RERANK_LABELS
    assert cards["zero-shot-classification"]["task"] == "zero-shot-classification"
    assert cards["zero-shot-classification"]["labels"] == NLI_LABELS
    assert all(card["ready"] for card in cards.values())


def test_v1_rerank_ranks_every_document_like_transformers(client: TestClient, relevance_oracle: Any) -> None:
    response = client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == "rerank"
    results = body["results"]
    expected = sigmoid(relevance_oracle(QUERY, DOCUMENTS))
    assert_ranked_like([item["index"] for item in results], dict(enumerate(expected.tolist())))
    scores = [item["relevance_score"] for item in results]
    assert scores == sorted(scores, reverse=True)
    for item in results:
        assert set(item) == {"index", "relevance_score"}  # no document unless asked
        assert abs(item["relevance_score"] - expected[item["index"]]) <= TOLERANCE, item


def test_v1_rerank_top_n_and_return_documents(client: TestClient) -> None:
    everything = client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS}).json()["results"]
    top = client.post(
        "/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS, "top_n": 2, "return_documents": True}
    ).json()["results"]
    assert [item["index"] for item in top] == [item["index"] for item in everything[:2]]
    for item in top:
        assert item["document"] == {"text": DOCUMENTS[item["index"]]}
    beyond = client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS[:2], "top_n": 10}).json()
    assert len(beyond["results"]) == 2


def test_tei_rerank_matches_v1_and_gives_raw_scores_and_texts(client: TestClient, relevance_oracle: Any) -> None:
    short = DOCUMENTS[:4]
    v1 = client.post("/v1/rerank", json={"query": QUERY, "documents": short}).json()["results"]
    tei = client.post("/rerank", json={"query": QUERY, "texts": short}).json()
    assert isinstance(tei, list) and [set(item) for item in tei] == [{"index", "score"}] * len(short)
    assert [item["index"] for item in tei] == [item["index"] for item in v1]
    assert all(abs(a["score"] - b["relevance_score"]) <= 1e-6 for a, b in zip(tei, v1, strict=True))
    raw = client.post("/rerank", json={"query": QUERY, "texts": short, "raw_scores": True, "return_text": True})
    assert raw.status_code == 200, raw.text
    logits = relevance_oracle(QUERY, short)
    for item in raw.json():
        assert abs(item["score"] - logits[item["index"]]) <= TOLERANCE and item["text"] == short[item["index"]]
    assert [item["index"] for item in raw.json()] == [item["index"] for item in tei]


def test_tei_rerank_truncates_only_when_asked(client: TestClient, relevance_oracle: Any) -> None:
    refused = client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS})
    assert_error(refused, 400, "bad_request", "document 4", "truncate")
    cut = client.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS, "truncate": True})
    assert cut.status_code == 200, cut.text
    expected = sigmoid(relevance_oracle(QUERY, DOCUMENTS))
    for item in cut.json():
        assert abs(item["score"] - expected[item["index"]]) <= TOLERANCE
    left = client.post(
        "/rerank", json={"query": QUERY, "texts": DOCUMENTS, "truncate": True, "truncation_direction": "Left"}
    )
    assert left.status_code == 200, left.text


@pytest.mark.parametrize("route", ["/v1/rerank", "/rerank"])
def test_rerank_client_errors(client: TestClient, route: str) -> None:
    field = "documents" if route == "/v1/rerank" else "texts"

    def post(**body: Any) -> Any:
        return client.post(route, json=body)

    assert_error(post(query=QUERY, **{field: []}), 422, "validation_error", field)
    assert_error(post(query=QUERY), 422, "validation_error", field)
    assert_error(post(query=QUERY, **{field: ["fine", "   "]}), 400, "bad_request", "document 1 is empty")
    assert_error(post(query="  ", **{field: ["fine"]}), 400, "bad_request", "query is empty")
    assert_error(post(query="the " * MAX_LENGTH, **{field: ["fine"]}), 400, "bad_request", "no room for a document")
    assert_error(post(query=QUERY, **{field: ["doc"] * (MAX_INPUTS + 1)}), 413, "payload_too_large")
    assert_error(post(query=QUERY, model="text-classification", **{field: ["doc"]}), 400, "bad_request", "rerank")
    assert_error(post(query=QUERY, **{field: ["doc"]}, top_k=3), 422, "validation_error")
    if route == "/v1/rerank":
        assert_error(post(query=QUERY, documents=["doc"], top_n=0), 422, "validation_error", "top_n")


@pytest.mark.parametrize(
    ("candidate_labels", "options"),
    [(LABELS, {}), (LABELS, {"multi_label": True}), ("film, city", {}), (["film"], {})],
    ids=str,
)
def test_zero_shot_matches_the_pipeline(
    client: TestClient, zero_shot_pipeline: Any, candidate_labels: Any, options: dict[str, Any]
) -> None:
    template = {"hypothesis_template": "this text is about {}."} if options else {}
    body = {"inputs": SEQUENCES, "candidate_labels": candidate_labels, **options, **template}
    response = client.post("/v1/zero-shot-classification", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["model"] == "zero-shot-classification" and len(answer["results"]) == len(SEQUENCES)
    theirs = zero_shot_pipeline(SEQUENCES, candidate_labels=candidate_labels, **options, **template)
    for ours, other in zip(answer["results"], theirs, strict=True):
        assert ours["sequence"] == other["sequence"]
        expected = dict(zip(other["labels"], other["scores"], strict=True))
        assert_ranked_like(ours["labels"], expected)
        assert ours["scores"] == sorted(ours["scores"], reverse=True)
        for label, score in zip(ours["labels"], ours["scores"], strict=True):
            assert abs(score - expected[label]) <= TOLERANCE, (label, score, expected)


def test_zero_shot_single_input_is_a_list_of_one(client: TestClient) -> None:
    body = client.post(
        "/v1/zero-shot-classification", json={"inputs": SEQUENCES[0], "candidate_labels": LABELS[:2]}
    ).json()
    assert len(body["results"]) == 1 and abs(sum(body["results"][0]["scores"]) - 1) < 1e-5


def test_zero_shot_client_errors(client: TestClient) -> None:
    def post(**body: Any) -> Any:
        return client.post("/v1/zero-shot-classification", json={"inputs": "a film", **body})

    assert_error(post(candidate_labels=[]), 422, "validation_error", "candidate_labels")
    assert_error(post(candidate_labels=" , "), 400, "bad_request", "candidate_labels is empty")
    assert_error(post(candidate_labels=["x"] * 101), 422, "validation_error", "candidate_labels")
    assert_error(post(candidate_labels="film", hypothesis_template="no field"), 400, "bad_request", "hypothesis")
    assert_error(post(candidate_labels="film", hypothesis_template="{:>99999999}"), 400, "bad_request", "hypothesis")
    assert_error(post(candidate_labels="film", multi_label=1), 422, "validation_error", "multi_label")
    assert_error(post(inputs="  ", candidate_labels="film"), 400, "bad_request", "empty")


def test_metrics_carry_the_task(client: TestClient) -> None:
    client.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS[:2]})
    client.post("/v1/zero-shot-classification", json={"inputs": "a film", "candidate_labels": "film"})
    text = client.get("/metrics").text
    assert 'bertserve_batch_size_count{model="rerank",task="rerank"}' in text
    assert 'task="zero-shot-classification"' in text
    assert 'bertserve_requests_total{route="/v1/rerank",status="200"}' in text


class RecordingRunner:
    """Wraps a runner; records the number of rows of every batch."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.output_names = inner.output_names
        self.rows: list[int] = []

    def run(self, batch: Any) -> dict[str, np.ndarray]:
        self.rows.append(int(batch.input_ids.shape[0]))
        return self.inner.run(batch)


def test_every_pair_of_a_zero_shot_request_goes_to_the_batcher_together(served: dict[str, TinyModel]) -> None:
    settings = Settings(intra_op_threads=1, model_workers=1, max_wait_ms=0.0)  # type: ignore[call-arg]
    engine = Engine.from_bundle(served["zero-shot-classification"].bundle, settings)
    runner = RecordingRunner(engine.pool.runner)
    for worker in engine.workers:
        worker.runner = runner
    params = ZeroShotParams(candidate_labels=("film", "city", "music"))

    async def main() -> list[Any]:
        await engine.start()
        runner.rows.clear()  # the warm-up batch
        try:
            return await engine.infer(["the movie was good.", "john lives in paris."], params)
        finally:
            await engine.stop()

    results = asyncio.run(main())
    assert [sorted(result["labels"]) for result in results] == [["city", "film", "music"]] * 2
    assert runner.rows == [6]  # 2 sequences x 3 labels, one model call
