"""Cohere's classify through Cohere's own client (``cohere.Client.classify``, ``POST /v1/classify``) against a real
server on a fine-tuned text-classification model: every label's confidence as ``/v1/text-classification`` scores it
(the transformers pipeline's semantics, tested there), single-label for a softmax model and multi-label (each label
over 0.5 predicted) for a model whose bundle says multi_label_classification."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator

import httpx
import pytest

from tests.service.apptools import real_server_for
from tests.service.tiny_models import TinyModel

cohere = pytest.importorskip("cohere")

TEXTS = ["a wonderful, moving film", "dull and far too long", "the team won the game in extra time"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    single = tiny_models["text-classification"].bundle
    multi = tmp_path_factory.mktemp("multi") / "bundle"  # the same graph, read as a multi-label classifier
    shutil.copytree(single, multi)
    spec = json.loads((multi / "bundle.json").read_text())
    (multi / "bundle.json").write_text(json.dumps({**spec, "problem_type": "multi_label_classification"}))
    bundles = {"single": single, "multi": multi, "embed": tiny_models["rerank"].bundle}
    with real_server_for(bundles, tune=False) as url:
        yield url


def v1_scores(url: str, model: str, texts: list[str], **options: object) -> list[dict[str, float]]:
    body = {"model": model, "inputs": texts, "top_k": None, **options}
    response = httpx.post(f"{url}/v1/text-classification", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return [{item["label"]: item["score"] for item in labels} for labels in response.json()["results"]]


def test_single_label(server_url: str) -> None:
    answer = cohere.Client(base_url=server_url, api_key="unused").classify(inputs=TEXTS, model="single")
    expected = v1_scores(server_url, "single", TEXTS)
    assert answer.id and len(answer.classifications) == len(TEXTS)
    for text, got, scores in zip(TEXTS, answer.classifications, expected, strict=True):
        best = max(scores, key=scores.__getitem__)
        assert (got.input, got.classification_type, got.prediction, got.predictions) == (
            text, "single-label", best, [best]
        )  # fmt: skip
        assert got.confidence == got.confidences[0] == scores[best]
        assert {label: value.confidence for label, value in got.labels.items()} == scores
        assert abs(sum(scores.values()) - 1) < 1e-5
    assert len({item.id for item in answer.classifications}) == len(TEXTS)


def test_multi_label(server_url: str) -> None:
    answer = cohere.Client(base_url=server_url, api_key="unused").classify(inputs=TEXTS, model="multi")
    expected = v1_scores(server_url, "multi", TEXTS)
    assert expected != v1_scores(server_url, "single", TEXTS)  # sigmoid, not softmax
    for got, scores in zip(answer.classifications, expected, strict=True):
        over = sorted((label for label, score in scores.items() if score > 0.5), key=lambda label: -scores[label])
        assert (got.classification_type, got.prediction, got.confidence) == ("multi-label", None, None)
        assert got.predictions == over and got.confidences == [scores[label] for label in over]
        assert {label: value.confidence for label, value in got.labels.items()} == scores
    assert all(0 < len(item.predictions) < len(item.labels) for item in answer.classifications)  # the rule cuts


def test_truncation(server_url: str) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused")
    end = client.classify(inputs=[LONG], model="single").classifications[0]
    assert {label: value.confidence for label, value in end.labels.items()} == v1_scores(
        server_url, "single", [LONG], truncation=True
    )[0]
    start = client.classify(inputs=[LONG + " but the end was wonderful"], model="single", truncate="START")
    cut_end = client.classify(inputs=[LONG + " but the end was wonderful"], model="single", truncate="END")
    assert start.classifications[0].labels != cut_end.classifications[0].labels
    with pytest.raises(cohere.errors.BadRequestError) as refused:
        client.classify(inputs=["short", LONG], model="single", truncate="NONE")
    assert "input 1 is" in str(refused.value.body) and "truncate: END or START" in str(refused.value.body)


def test_what_classify_does_not_take(server_url: str) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused")
    with pytest.raises(cohere.errors.UnprocessableEntityError) as few_shot:
        client.classify(inputs=TEXTS, model="single", examples=[cohere.ClassifyExample(text="great", label="good")])
    assert "examples are not taken" in str(few_shot.value.body)
    with pytest.raises(cohere.errors.UnprocessableEntityError) as preset:
        client.classify(inputs=TEXTS, model="single", preset="my-preset")
    assert "preset is not taken" in str(preset.value.body)
    with pytest.raises(cohere.errors.BadRequestError) as other_task:
        client.classify(inputs=TEXTS, model="embed")
    assert "serves rerank, not text-classification" in str(other_task.value.body)
    with pytest.raises(cohere.core.api_error.ApiError) as missing:
        client.classify(inputs=TEXTS, model="nope")
    assert missing.value.status_code == 404
