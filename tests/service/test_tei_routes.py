"""TEI's ``/predict``, ``/tokenize``, ``/decode`` and ``/info`` (and ``/embed``, ``/rerank``): the answers equal the
v1 routes' and the tokenizer's, and validate against TEI's own published OpenAPI schemas (tests/service/data)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient
from tokenizers import Tokenizer

from service.settings import Settings
from tests.service.apptools import ready_app_client
from tests.service.tiny_models import TinyModel

TEI_SCHEMAS = json.loads((Path(__file__).parent / "data" / "tei_openapi.json").read_text())["components"]["schemas"]
TEXT = "john smith lives in paris"
PAIR = ["a man is eating.", "someone eats food."]


def openapi_30_to_json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` as JSON Schema's ``null`` type; references into the TEI document kept."""
    if isinstance(node, dict):
        converted = {key: openapi_30_to_json_schema(value) for key, value in node.items() if key != "nullable"}
        if node.get("nullable") and "type" in node:
            converted["type"] = [node["type"], "null"]
        return converted
    if isinstance(node, list):
        return [openapi_30_to_json_schema(item) for item in node]
    return node


def assert_tei_shape(value: Any, schema_name: str) -> None:
    document = {"components": {"schemas": openapi_30_to_json_schema(TEI_SCHEMAS)}}
    jsonschema.validate(value, {**document, "$ref": f"#/components/schemas/{schema_name}"})


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel]) -> Iterator[TestClient]:
    models = [f"{task}={tiny_models[task].bundle}" for task in ("text-classification", "rerank")]
    settings = Settings(models=models, intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    with ready_app_client(settings) as test_client:
        yield test_client


def post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def v1_labels(client: TestClient, inputs: Any, **options: Any) -> list[list[dict[str, Any]]]:
    body = {"model": "text-classification", "inputs": inputs, "top_k": None, **options}
    results = post(client, "/v1/text-classification", body)["results"]
    return [[{"score": item["score"], "label": item["label"]} for item in labels] for labels in results]


def test_predict_single_pair_and_batch(client: TestClient) -> None:
    model = {"model": "text-classification"}
    single = post(client, "/predict", {**model, "inputs": TEXT})
    pair = post(client, "/predict", {**model, "inputs": PAIR})
    batch = post(client, "/predict", {**model, "inputs": [[TEXT], PAIR]})
    pair_v1 = {"text": PAIR[0], "text_pair": PAIR[1]}
    assert single == v1_labels(client, TEXT)[0] and len(single) == 3
    assert pair == v1_labels(client, pair_v1)[0]
    assert batch == [single, pair]
    raw = post(client, "/predict", {**model, "inputs": TEXT, "raw_scores": True})
    assert raw == v1_labels(client, TEXT, function_to_apply="none")[0]
    for answer in (single, pair, batch, raw):
        assert_tei_shape(answer, "PredictResponse")


def test_tokenize_and_decode(client: TestClient, tiny_models: dict[str, TinyModel]) -> None:
    tokenizer = Tokenizer.from_file(str(tiny_models["text-classification"].bundle / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    [tokens] = post(client, "/tokenize", {"model": "text-classification", "inputs": TEXT})
    encoding = tokenizer.encode(TEXT)
    assert [token["id"] for token in tokens] == encoding.ids
    assert [token["special"] for token in tokens] == [bool(flag) for flag in encoding.special_tokens_mask]
    words = [token for token in tokens if not token["special"]]
    assert all(TEXT[token["start"] : token["stop"]] == token["text"] for token in words)
    assert tokens[0] == {"id": tokens[0]["id"], "text": "[CLS]", "special": True, "start": None, "stop": None}
    bare = post(client, "/tokenize", {"model": "text-classification", "inputs": [TEXT], "add_special_tokens": False})
    assert bare == [words]
    assert_tei_shape(bare, "TokenizeResponse")
    decoded = post(client, "/decode", {"model": "text-classification", "ids": [token["id"] for token in tokens]})
    assert decoded == [TEXT] and decoded == [tokenizer.decode(encoding.ids)]
    body = {"model": "text-classification", "ids": [encoding.ids], "skip_special_tokens": False}
    kept = post(client, "/decode", body)
    assert kept[0].startswith("[CLS]")
    assert_tei_shape(decoded, "DecodeResponse")


def test_info_describes_each_model_as_tei_does(client: TestClient, tiny_models: dict[str, TinyModel]) -> None:
    classifier = client.get("/info", params={"model": "text-classification"}).json()
    reranker = client.get("/info", params={"model": "rerank"}).json()
    for info in (classifier, reranker):
        assert_tei_shape(info, "Info")
    assert classifier["model_type"]["classifier"]["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}
    assert classifier["model_type"]["classifier"]["label2id"] == {"negative": 0, "neutral": 1, "positive": 2}
    assert "reranker" in reranker["model_type"] and classifier["max_input_length"] == 128
    assert classifier["model_dtype"] == "float32" and classifier["model_id"] == "text-classification"


def test_a_model_must_be_named_when_several_are_served(client: TestClient) -> None:
    response = client.post("/tokenize", json={"inputs": TEXT})
    assert response.status_code == 400 and "name one with model" in response.json()["error"]["message"]
    assert client.get("/info").status_code == 400
    assert client.get("/info", params={"model": "nope"}).status_code == 404
