"""Sentence similarity from an embeddings model: /v1/sentence-similarity and TEI's /similarity answer what
sentence-transformers' ``model.similarity`` (cosine) gives for the folder the bundle was exported from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.apptools import ready_app_client
from tests.service.test_tei_routes import assert_tei_shape
from tests.service.tiny_models import TinyModel

SOURCE = "the man went to the city."
SENTENCES = ["a man went to the old city", "the film was terrible and boring", "the team won the game"]
OTHER = {"source_sentence": "the river runs by the bank", "sentences": ["mary and john went to london"]}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """sentence-transformers folders: mean + Normalize, and CLS without Normalize (cosine must not assume unit
    vectors)."""
    from tests.model_export.sentence_models import make_sentence_transformer

    root = tmp_path_factory.mktemp("similarity-models")
    return {
        "mean": make_sentence_transformer(root / "mean", "mean", normalize=True, seed=0),
        "cls": make_sentence_transformer(root / "cls", "cls", normalize=False, seed=1),
    }


@pytest.fixture(scope="module")
def client(
    folders: dict[str, Path], tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestClient]:
    from model_export.export import export_bundle

    root = tmp_path_factory.mktemp("similarity-bundles")
    models = [f"{name}={export_bundle(folder, root / name).path}" for name, folder in folders.items()]
    models.append(f"sentiment={tiny_models['text-classification'].bundle}")
    with ready_app_client(Settings(models=models, intra_op_threads=1, tune=False)) as test_client:
        yield test_client


def expected(folder: Path, source: str, sentences: list[str]) -> list[float]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    scores = model.similarity(model.encode([source]), model.encode(sentences))
    return [float(value) for value in scores[0]]


@pytest.mark.parametrize("name", ["mean", "cls"])
def test_v1_answers_sentence_transformers_similarity(client: TestClient, folders: dict[str, Path], name: str) -> None:
    single = client.post(
        "/v1/sentence-similarity", json={"model": name, "inputs": {"source_sentence": SOURCE, "sentences": SENTENCES}}
    )
    assert single.status_code == 200, single.text
    body = single.json()
    assert body["model"] == name and len(body["results"]) == 1
    np.testing.assert_allclose(body["results"][0], expected(folders[name], SOURCE, SENTENCES), atol=1e-5)
    listed = client.post(
        "/v1/sentence-similarity",
        json={"model": name, "inputs": [{"source_sentence": SOURCE, "sentences": SENTENCES}, OTHER]},
    ).json()["results"]
    assert len(listed) == 2 and listed[0] == body["results"][0]
    np.testing.assert_allclose(
        listed[1], expected(folders[name], OTHER["source_sentence"], OTHER["sentences"]), atol=1e-5
    )


def test_tei_similarity_has_tei_shape_and_the_same_answer(client: TestClient) -> None:
    inputs = {"source_sentence": SOURCE, "sentences": SENTENCES}
    tei = client.post("/similarity", json={"model": "mean", "inputs": inputs, "parameters": {"truncate": True}})
    assert tei.status_code == 200, tei.text
    assert_tei_shape(tei.json(), "SimilarityResponse")
    v1 = client.post("/v1/sentence-similarity", json={"model": "mean", "inputs": inputs}).json()["results"][0]
    assert tei.json() == v1


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"model": "mean", "inputs": {"source_sentence": SOURCE}}, 422, "sentences"),
        ({"model": "mean", "inputs": {"source_sentence": SOURCE, "sentences": []}}, 422, "sentences"),
        ({"model": "mean", "inputs": {"source_sentence": SOURCE, "sentences": [1]}}, 422, "sentences"),
        ({"model": "sentiment", "inputs": {"source_sentence": SOURCE, "sentences": ["x"]}}, 400, "text-classification"),
        ({"model": "mean", "inputs": {"source_sentence": "x " * 400, "sentences": ["y"]}}, 400, "tokens"),
    ],
)
def test_bad_requests_are_clear_4xx(client: TestClient, body: dict[str, object], status: int, words: str) -> None:
    response = client.post("/v1/sentence-similarity", json=body)
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]
