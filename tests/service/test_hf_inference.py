"""The HF Inference API routes (``POST /models/{name}``, ``POST /``) driven by ``huggingface_hub.InferenceClient``
against a real server, every task compared with the v1 route's answer to the same input; sentence similarity with
the cosines of the TEI vectors; the errors in the client's terms."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from service.settings import Settings
from tests.service.apptools import free_port, ready_app_client, real_server
from tests.service.tiny_models import TinyModel

huggingface_hub = pytest.importorskip("huggingface_hub")

TEXT = "john smith lives in paris and loves the movie"
QUESTION = {"question": "where does john live?", "context": "john smith lives in paris with his family."}
SENTENCES = ["a man eats food.", "someone is eating.", "the river runs by the bank"]
TASKS = ("text-classification", "token-classification", "question-answering", "fill-mask", "zero-shot-classification")


@pytest.fixture(scope="module")
def embedding_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from model_export.export import export_bundle
    from tests.model_export.sentence_models import make_sentence_transformer

    root = tmp_path_factory.mktemp("hf-embeddings")
    folder = make_sentence_transformer(root / "mean", "mean", normalize=True, seed=0)
    return export_bundle(folder, root / "bundle").path


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel], embedding_bundle: Path) -> Iterator[str]:
    models = [f"{task}={tiny_models[task].bundle}" for task in TASKS] + [f"emb={embedding_bundle}"]
    settings = Settings(models=models, port=free_port(), intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    with real_server(settings) as url:
        yield url


@pytest.fixture(scope="module")
def http(server_url: str) -> Iterator[httpx.Client]:
    """The plain HTTP view of the same server: the v1 and TEI answers the client's are compared with."""
    client = httpx.Client(base_url=server_url, timeout=30)
    yield client
    client.close()


@pytest.fixture
def hf(server_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An InferenceClient per model name; the client refuses any URL while HF_HUB_OFFLINE is set (NOTES)."""
    from huggingface_hub.utils import reset_sessions

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    reset_sessions()  # a session made while offline keeps refusing
    yield lambda name: huggingface_hub.InferenceClient(model=f"{server_url}/models/{name}")
    monkeypatch.undo()
    reset_sessions()  # and one made now would stay online for the tests after


def v1(http: httpx.Client, task: str, inputs: Any, **parameters: Any) -> Any:
    response = http.post(f"/v1/{task}", json={"model": task, "inputs": inputs, **parameters})
    assert response.status_code == 200, response.text
    return response.json()["results"][0]


def as_dicts(items: list[Any]) -> list[dict[str, Any]]:
    return [{key: value for key, value in vars(item).items() if value is not None} for item in items]


def test_text_classification(hf: Any, http: httpx.Client) -> None:
    got = hf("text-classification").text_classification(TEXT, top_k=3)
    assert as_dicts(got) == v1(http, "text-classification", TEXT, top_k=3)
    assert len(got) == 3


def test_token_classification(hf: Any, http: httpx.Client) -> None:
    got = hf("token-classification").token_classification(TEXT, aggregation_strategy="first")
    expected = v1(http, "token-classification", TEXT, aggregation_strategy="first")
    assert as_dicts(got) == expected


def test_question_answering_one_and_several_answers(hf: Any, http: httpx.Client) -> None:
    client = hf("question-answering")
    one = client.question_answering(**QUESTION)
    assert {"answer": one.answer, "score": one.score, "start": one.start, "end": one.end} == v1(
        http, "question-answering", QUESTION
    )[0]
    several = client.question_answering(**QUESTION, top_k=2)
    assert [item["answer"] for item in several] == [
        item["answer"] for item in v1(http, "question-answering", QUESTION, top_k=2)
    ]


def test_fill_mask(hf: Any, http: httpx.Client) -> None:
    got = hf("fill-mask").fill_mask("john lives in [MASK] .", top_k=4)
    assert as_dicts(got) == v1(http, "fill-mask", "john lives in [MASK] .", top_k=4)[0]


def test_zero_shot_classification(hf: Any, http: httpx.Client) -> None:
    labels = ["city", "film", "music"]
    got = hf("zero-shot-classification").zero_shot_classification(TEXT, labels)
    expected = v1(http, "zero-shot-classification", TEXT, candidate_labels=labels)
    assert [(item.label, item.score) for item in got] == list(zip(expected["labels"], expected["scores"], strict=True))


def test_feature_extraction_and_sentence_similarity(hf: Any, http: httpx.Client) -> None:
    client = hf("emb")
    vectors = client.feature_extraction(SENTENCES)
    tei = np.asarray(http.post("/embed", json={"model": "emb", "inputs": SENTENCES}).json(), dtype=np.float32)
    np.testing.assert_array_equal(vectors, tei)
    similarity = client.sentence_similarity(SENTENCES[0], other_sentences=SENTENCES[1:])
    np.testing.assert_allclose(similarity, tei[1:] @ tei[0], rtol=1e-6, atol=1e-6)
    assert client.feature_extraction(SENTENCES[0]).shape == (1, tei.shape[1])


@pytest.mark.parametrize(
    ("path", "body", "content_type", "status", "words"),
    [
        ("/models/nope", {"inputs": "x"}, "application/json", 404, "no model named 'nope'"),
        ("/models/fill-mask", {"inputs": "no mask here"}, "application/json", 400, "[MASK]"),
        ("/models/text-classification", {"text": "x"}, "application/json", 400, '"inputs"'),
        ("/models/text-classification", {"inputs": "x", "top_k": 2}, "application/json", 422, "in parameters"),
        ("/models/text-classification", {"inputs": "x", "parameters": {"top_k": 0}}, "application/json", 422, "top_k"),
        ("/models/text-classification", {"inputs": "x"}, "text/plain", 415, "application/json"),
        ("/", {"inputs": "x"}, "application/json", 400, "post to /models/NAME"),
    ],
)
def test_errors_in_the_clients_terms(
    http: httpx.Client, path: str, body: dict, content_type: str, status: int, words: str
) -> None:
    import json

    response = http.post(path, content=json.dumps(body), headers={"content-type": content_type})
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]


def test_root_answers_when_one_model_is_served(tiny_models: dict[str, TinyModel]) -> None:
    settings = Settings(models=[f"sst={tiny_models['text-classification'].bundle}"], tune=False)  # type: ignore[call-arg]
    with ready_app_client(settings) as client:
        root = client.post("/", json={"inputs": TEXT, "parameters": {"top_k": 2}})
        named = client.post("/models/sst", json={"inputs": TEXT, "parameters": {"top_k": 2}})
        v1_answer = client.post("/v1/text-classification", json={"inputs": TEXT, "top_k": 2}).json()["results"]
    assert root.status_code == named.status_code == 200
    assert root.json() == named.json() == v1_answer
    assert client.app.openapi()["paths"]["/models/{name}"]["post"]["tags"] == ["hf-inference"]  # type: ignore[attr-defined]


def test_the_default_model_answers_requests_that_name_none(tiny_models: dict[str, TinyModel]) -> None:
    bundle = tiny_models["text-classification"].bundle
    models = [f"first={bundle}", f"second={bundle}", f"qa={tiny_models['question-answering'].bundle}"]
    settings = Settings(models=models, default_model="second", tune=False)  # type: ignore[call-arg]
    with ready_app_client(settings) as client:
        root = client.post("/", json={"inputs": TEXT})
        v1 = client.post("/v1/text-classification", json={"inputs": TEXT})
        qa = client.post("/v1/question-answering", json={"inputs": QUESTION})  # the only QA model, not the default
        info = client.get("/info")
    assert root.status_code == v1.status_code == qa.status_code == info.status_code == 200
    assert v1.json()["model"] == "second" and qa.json()["model"] == "qa" and info.json()["model_id"] == "second"
    wrong = Settings(models=models, default_model="nope", tune=False)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="default model 'nope' is not loaded"), ready_app_client(wrong):
        pass
