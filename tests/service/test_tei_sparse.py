"""TEI's ``/embed_sparse`` on a fill-mask bundle: SPLADE weights equal torch's (log(1 + ReLU(MLM logits)) max-pooled
over the tokens) and sentence-transformers' sparse encoder, in TEI's own response shape."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.apptools import ready_app_client
from tests.service.test_tei_routes import assert_tei_shape
from tests.service.tiny_models import TinyModel

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TEXTS = ["john smith lives in paris.", "the movie was wonderful, the actors were brilliant!", "a"]


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel]) -> Iterator[TestClient]:
    settings = Settings(models=[f"mlm={tiny_models['fill-mask'].bundle}"], intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    with ready_app_client(settings) as test_client:
        yield test_client


def dense(sparse: list[dict[str, float]], size: int) -> np.ndarray:
    vector = np.zeros(size, dtype=np.float32)
    for item in sparse:
        vector[int(item["index"])] = item["value"]
    return vector


def torch_splade(checkpoint: object, texts: list[str]) -> np.ndarray:
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForMaskedLM.from_pretrained(checkpoint).eval()
    features = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**features).logits  # (B, T, V)
    weights = torch.log1p(torch.relu(logits)) * features["attention_mask"].unsqueeze(-1)
    return weights.max(dim=1).values.numpy()


def test_sparse_weights_equal_torch_and_sentence_transformers(
    client: TestClient, tiny_models: dict[str, TinyModel]
) -> None:
    response = client.post("/embed_sparse", json={"inputs": TEXTS})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert_tei_shape(answer, "EmbedSparseResponse")
    checkpoint = tiny_models["fill-mask"].checkpoint
    expected = torch_splade(checkpoint, TEXTS)
    got = np.stack([dense(item, expected.shape[1]) for item in answer])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    for item in answer:
        indices = [value["index"] for value in item]
        assert indices == sorted(indices) and all(value["value"] > 0 for value in item)
    sparse_encoder = pytest.importorskip("sentence_transformers.sparse_encoder")
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    modules = [MLMTransformer(str(checkpoint)), SpladePooling("max")]
    encoder = sparse_encoder.SparseEncoder(modules=modules, device="cpu")
    oracle = encoder.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    np.testing.assert_allclose(got, oracle, atol=1e-5)


def test_a_single_text_and_the_truncation_rule(client: TestClient) -> None:
    single = client.post("/embed_sparse", json={"inputs": TEXTS[0]}).json()
    batched = client.post("/embed_sparse", json={"inputs": TEXTS[:1]}).json()
    assert single == batched
    long_text = " ".join(["paris"] * 400)
    refused = client.post("/embed_sparse", json={"inputs": long_text})
    assert refused.status_code == 400 and "truncate: true cuts it" in refused.json()["error"]["message"]
    cut = client.post("/embed_sparse", json={"inputs": long_text, "truncate": True})
    assert cut.status_code == 200 and cut.json()[0]
