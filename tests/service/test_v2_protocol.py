"""Open Inference Protocol v2 over HTTP, driven by a client nobody here wrote: ``tritonclient.http``.

A real uvicorn server serves one tiny model per task (every task of ``contract.tasks``). Each task's v2 answer
is compared with the v1 route's answer for the same inputs and options: labels and JSON records equal, scores equal
as float32. tritonclient sends binary tensor data by default; the JSON path (``binary_data=False``) is checked too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from contract.tasks import TASK_NAMES
from service.settings import Settings
from service.tasks import LAYOUTS
from tests.service.apptools import bundles_server
from tests.service.tiny_models import TinyModel

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = [
    "john smith lives in paris and works for google.",
    "the movie was wonderful, the actors were brilliant.",
    "  Café naïve — 東京 🙂 ",
]
PAIRS = ["mary lives in london.", "the film was terrible.", "a short one"]


@pytest.fixture(scope="module")
def bundles(tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Model name (= task) -> bundle, for every task the service serves (feature-extraction exported here)."""
    from model_export.export import export_bundle
    from tests.model_export.sentence_models import make_encoder

    root = tmp_path_factory.mktemp("v2-embedding")
    encoder = make_encoder(root / "encoder", seed=3)
    served = {task: model.bundle for task, model in tiny_models.items()}
    served["feature-extraction"] = export_bundle(encoder, root / "bundle", task="feature-extraction").path
    assert set(served) == set(TASK_NAMES)
    return served


server_url = bundles_server(max_inputs_per_request=8, timeout_s=20)


@pytest.fixture(scope="module")
def triton(server_url: str) -> Iterator[Any]:
    client = httpclient.InferenceServerClient(url=server_url.removeprefix("http://"))
    yield client
    client.close()


def text_input(name: str, values: list[str], binary: bool = True, shape: tuple[int, ...] | None = None) -> Any:
    array = np.array(values, dtype=np.object_).reshape(shape or (len(values),))
    tensor = httpclient.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def v1(url: str, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(f"{url}{path}", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def strings(array: np.ndarray) -> list[str]:
    return [item.decode() if isinstance(item, bytes) else str(item) for item in array.reshape(-1)]


def float32(values: list[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_server_health_and_metadata(triton: Any) -> None:
    assert triton.is_server_live() and triton.is_server_ready()
    metadata = triton.get_server_metadata()
    assert metadata["name"] == "bertserve" and "binary_tensor_data" in metadata["extensions"]


@pytest.mark.parametrize("task", TASK_NAMES)
def test_model_metadata_and_readiness(triton: Any, task: str) -> None:
    assert triton.is_model_ready(task) and triton.is_model_ready(task, model_version="1")
    metadata = triton.get_model_metadata(task)
    assert metadata["name"] == task and metadata["versions"] == ["1"] and metadata["platform"] == "onnxruntime_onnx"
    layout = LAYOUTS[task]
    assert [(item["name"], item["datatype"]) for item in metadata["inputs"]] == [
        (spec.name, spec.datatype) for spec in layout.inputs
    ]
    assert [item["name"] for item in metadata["outputs"]] == list(layout.output_names)
    assert all(isinstance(dim, int) for item in metadata["inputs"] + metadata["outputs"] for dim in item["shape"])
    assert triton.get_model_metadata(task, model_version="1") == metadata


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("top_k", [1, 3, None])
def test_text_classification_matches_v1(triton: Any, server_url: str, binary: bool, top_k: int | None) -> None:
    for pairs in (None, PAIRS):
        inputs = [text_input("text", TEXTS, binary)]
        body_inputs: list[Any] = list(TEXTS)
        if pairs is not None:
            inputs.append(text_input("text_pair", pairs, binary))
            body_inputs = [{"text": text, "text_pair": pair} for text, pair in zip(TEXTS, pairs, strict=True)]
        outputs = [httpclient.InferRequestedOutput(name, binary_data=binary) for name in ("label", "score")]
        result = triton.infer("text-classification", inputs, outputs=outputs, parameters={"top_k": top_k})
        expected = v1(server_url, "/v1/text-classification", {"inputs": body_inputs, "top_k": top_k})["results"]
        width = len(expected[0])
        assert ("binary_data_size" in (result.get_output("label").get("parameters") or {})) == binary
        assert result.as_numpy("label").shape == (len(TEXTS), width)
        assert strings(result.as_numpy("label")) == [item["label"] for row in expected for item in row]
        scores = float32([item["score"] for row in expected for item in row])
        np.testing.assert_array_equal(result.as_numpy("score").reshape(-1), scores)


def test_a_text_tensor_may_carry_a_trailing_dimension(triton: Any, server_url: str) -> None:
    result = triton.infer("text-classification", [text_input("text", TEXTS, shape=(len(TEXTS), 1))])
    expected = v1(server_url, "/v1/text-classification", {"inputs": TEXTS})["results"]
    assert strings(result.as_numpy("label")) == [row[0]["label"] for row in expected]


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("strategy", ["simple", "none"])
def test_token_classification_matches_v1(triton: Any, server_url: str, binary: bool, strategy: str) -> None:
    inputs = [text_input("text", TEXTS, binary), text_input("ignore_labels", ["O", "B-MISC"], binary)]
    outputs = [httpclient.InferRequestedOutput("entities", binary_data=binary)]
    parameters = {"aggregation_strategy": strategy}
    result = triton.infer("token-classification", inputs, outputs=outputs, parameters=parameters)
    body = {"inputs": TEXTS, "aggregation_strategy": strategy, "ignore_labels": ["O", "B-MISC"]}
    expected = v1(server_url, "/v1/token-classification", body)["results"]
    assert [json.loads(item) for item in strings(result.as_numpy("entities"))] == expected
    assert any(expected), "the tiny model should find some entities"


@pytest.mark.parametrize("top_k", [1, 3])
def test_question_answering_matches_v1(triton: Any, server_url: str, top_k: int) -> None:
    questions = ["where does john live?", "who works for google?", "what was wonderful?"]
    contexts = [TEXTS[0], TEXTS[0], TEXTS[1]]
    inputs = [text_input("question", questions), text_input("context", contexts)]
    result = triton.infer("question-answering", inputs, parameters={"top_k": top_k, "max_answer_len": 5})
    pairs = [{"question": q, "context": c} for q, c in zip(questions, contexts, strict=True)]
    expected = v1(server_url, "/v1/question-answering", {"inputs": pairs, "top_k": top_k, "max_answer_len": 5})
    answers = [answer for row in expected["results"] for answer in row]
    assert result.as_numpy("answer_count").tolist() == [len(row) for row in expected["results"]]
    assert strings(result.as_numpy("answer")) == [answer["answer"] for answer in answers]
    assert result.as_numpy("start").tolist() == [answer["start"] for answer in answers]
    assert result.as_numpy("end").tolist() == [answer["end"] for answer in answers]
    np.testing.assert_array_equal(result.as_numpy("score"), float32([answer["score"] for answer in answers]))


@pytest.mark.parametrize("binary", [True, False])
def test_fill_mask_matches_v1(triton: Any, server_url: str, binary: bool) -> None:
    texts = ["the [MASK] was wonderful.", "john [MASK] in [MASK]."]
    outputs = [httpclient.InferRequestedOutput("predictions", binary_data=binary)]
    result = triton.infer("fill-mask", [text_input("text", texts, binary)], outputs=outputs, parameters={"top_k": 3})
    expected = v1(server_url, "/v1/fill-mask", {"inputs": texts, "top_k": 3})["results"]
    assert [json.loads(item) for item in strings(result.as_numpy("predictions"))] == expected
    targeted = triton.infer("fill-mask", [text_input("text", texts), text_input("targets", ["paris", "movie"])])
    expected = v1(server_url, "/v1/fill-mask", {"inputs": texts, "targets": ["paris", "movie"]})["results"]
    assert [json.loads(item) for item in strings(targeted.as_numpy("predictions"))] == expected


@pytest.mark.parametrize("normalize", [True, False])
def test_feature_extraction_matches_tei_embed(triton: Any, server_url: str, normalize: bool) -> None:
    result = triton.infer("feature-extraction", [text_input("text", TEXTS)], parameters={"normalize": normalize})
    expected = httpx.post(f"{server_url}/embed", json={"inputs": TEXTS, "normalize": normalize}, timeout=30).json()
    embedding = result.as_numpy("embedding")
    assert embedding.dtype == np.float32 and embedding.shape == (len(TEXTS), len(expected[0]))
    np.testing.assert_array_equal(embedding, np.asarray(expected, dtype=np.float32))


@pytest.mark.parametrize("top_n", [None, 2])
def test_rerank_matches_v1(triton: Any, server_url: str, top_n: int | None) -> None:
    query = "where does john smith live?"
    inputs = [text_input("query", [query], shape=(1,)), text_input("documents", TEXTS + PAIRS)]
    parameters = {} if top_n is None else {"top_n": top_n}
    result = triton.infer("rerank", inputs, parameters=parameters)
    expected = v1(server_url, "/v1/rerank", {"query": query, "documents": TEXTS + PAIRS, "top_n": top_n})["results"]
    assert result.as_numpy("index").tolist() == [item["index"] for item in expected]
    np.testing.assert_array_equal(
        result.as_numpy("relevance_score"), float32([item["relevance_score"] for item in expected])
    )


@pytest.mark.parametrize("labels_as", ["tensor", "parameter"])
def test_zero_shot_classification_matches_v1(triton: Any, server_url: str, labels_as: str) -> None:
    labels = ["film", "city", "music"]
    options: dict[str, Any] = {"multi_label": True, "hypothesis_template": "This text is about {}."}
    inputs = [text_input("text", TEXTS)]
    if labels_as == "tensor":
        inputs.append(text_input("candidate_labels", labels))
        result = triton.infer("zero-shot-classification", inputs, parameters=options)
    else:
        parameters = {**options, "candidate_labels": ", ".join(labels)}
        result = triton.infer("zero-shot-classification", inputs, parameters=parameters)
    body = {"inputs": TEXTS, "candidate_labels": labels, **options}
    expected = v1(server_url, "/v1/zero-shot-classification", body)["results"]
    assert result.as_numpy("label").shape == (len(TEXTS), len(labels))
    assert strings(result.as_numpy("label")) == [label for item in expected for label in item["labels"]]
    scores = float32([score for item in expected for score in item["scores"]])
    np.testing.assert_array_equal(result.as_numpy("score").reshape(-1), scores)


def test_only_the_requested_outputs_come_back_each_as_asked(triton: Any) -> None:
    outputs = [httpclient.InferRequestedOutput("score", binary_data=False)]
    result = triton.infer("text-classification", [text_input("text", TEXTS)], outputs=outputs)
    response = result.get_response()
    assert [output["name"] for output in response["outputs"]] == ["score"]
    assert "data" in response["outputs"][0] and result.as_numpy("score").shape == (len(TEXTS), 1)


def assert_v2_error(excinfo: pytest.ExceptionInfo[InferenceServerException], status: str, *words: str) -> None:
    assert excinfo.value.status() == status, excinfo.value
    for word in words:
        assert word in excinfo.value.message(), excinfo.value.message()


def test_errors_reach_the_client_in_the_protocols_shape(triton: Any, server_url: str) -> None:
    assert not triton.is_model_ready("nope") and not triton.is_model_ready("rerank", model_version="2")
    with pytest.raises(InferenceServerException) as excinfo:
        triton.get_model_metadata("nope")
    assert_v2_error(excinfo, "404", "nope")
    with pytest.raises(InferenceServerException) as excinfo:
        triton.infer("text-classification", [text_input("text", TEXTS)], parameters={"top_n": 2})
    assert_v2_error(excinfo, "400", "top_n", "top_k")
    with pytest.raises(InferenceServerException) as excinfo:
        triton.infer("text-classification", [text_input("text", TEXTS)], parameters={"top_k": 0})
    assert_v2_error(excinfo, "422", "top_k")
    with pytest.raises(InferenceServerException) as excinfo:
        triton.infer("question-answering", [text_input("question", ["where?"])])
    assert_v2_error(excinfo, "400", "context")
    with pytest.raises(InferenceServerException) as excinfo:
        triton.infer("text-classification", [text_input("text", TEXTS), text_input("text_pair", PAIRS[:2])])
    assert_v2_error(excinfo, "400", "text_pair")
    with pytest.raises(InferenceServerException) as excinfo:
        triton.infer("fill-mask", [text_input("text", ["no mask here"])])
    assert_v2_error(excinfo, "400")
    numbers = httpclient.InferInput("text", [2], "INT64")
    numbers.set_data_from_numpy(np.array([1, 2], dtype=np.int64))
    with pytest.raises(InferenceServerException) as excinfo:
        triton.infer("text-classification", [numbers])
    assert_v2_error(excinfo, "400", "BYTES")


def test_error_bodies_are_a_string_on_v2_and_unchanged_on_v1(server_url: str) -> None:
    bad = {"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES", "data": ["only one"]}]}
    for response in (
        httpx.post(f"{server_url}/v2/models/text-classification/infer", json=bad),
        httpx.post(f"{server_url}/v2/models/nope/infer", json=bad),
        httpx.post(f"{server_url}/v2/models/text-classification/infer", content=b"{not json"),
        httpx.get(f"{server_url}/v2/no/such/path"),
    ):
        assert response.status_code in (400, 404, 422), response.text
        assert set(response.json()) == {"error"} and isinstance(response.json()["error"], str), response.text
    v1_error = httpx.post(f"{server_url}/v1/text-classification", json={"inputs": "x", "model": "nope"}).json()
    assert v1_error["error"]["type"] == "model_not_found"


def test_plain_json_request_as_curl_sends_it(server_url: str) -> None:
    body = {
        "id": "42",
        "inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["the movie was wonderful."]}],
        "parameters": {"top_k": 2},
    }
    response = httpx.post(f"{server_url}/v2/models/text-classification/infer", json=body)
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    reply = response.json()
    assert reply["model_name"] == "text-classification" and reply["id"] == "42"
    expected = v1(server_url, "/v1/text-classification", {"inputs": ["the movie was wonderful."], "top_k": 2})
    label = next(output for output in reply["outputs"] if output["name"] == "label")
    assert label == {
        "name": "label",
        "datatype": "BYTES",
        "shape": [1, 2],
        "data": [item["label"] for item in expected["results"][0]],
    }


def test_api_keys_guard_v2_inference_but_not_its_health_and_refusals_keep_the_v2_shape() -> None:
    from fastapi.testclient import TestClient

    from service.app import create_app

    settings = Settings(api_keys=["secret"], max_body_bytes=1024)  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as app:
        assert app.get("/v2/health/live").json() == {"live": True}
        refused = app.post("/v2/models/any/infer", json={"inputs": []})
        assert refused.status_code == 401 and isinstance(refused.json()["error"], str)
        assert app.get("/v1/models").json()["error"]["type"] == "unauthorized"
        key = {"Authorization": "Bearer secret"}
        too_large = app.post("/v2/models/any/infer", content=b"x" * 2048, headers=key)
        assert too_large.status_code == 413 and isinstance(too_large.json()["error"], str)
        missing = app.get("/v2/models/any", headers=key)
        assert missing.status_code == 404 and "any" in missing.json()["error"]


def test_a_body_in_a_media_type_that_is_not_json_is_a_415_on_v2_as_on_v1(server_url: str) -> None:
    """curl -d sends form encoding: refused with the header to send; no media type at all (tritonclient) is read."""
    body = json.dumps({"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a fine film"]}]})
    form = {"content-type": "application/x-www-form-urlencoded"}
    refused = httpx.post(f"{server_url}/v2/models/text-classification/infer", content=body, headers=form)
    assert refused.status_code == 415
    assert (
        "Content-Type: application/json" in refused.json()["error"]
        and "x-www-form-urlencoded" in refused.json()["error"]
    )
    v1 = httpx.post(f"{server_url}/v1/text-classification", content=json.dumps({"inputs": "a fine film"}), headers=form)
    assert v1.status_code == 415
    read = httpx.post(f"{server_url}/v2/models/text-classification/infer", content=body)
    assert "content-type" not in read.request.headers and read.status_code == 200
    binary = {"content-type": "application/octet-stream"}
    assert (
        httpx.post(f"{server_url}/v2/models/text-classification/infer", content=body, headers=binary).status_code == 200
    )
