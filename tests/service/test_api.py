from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.apptools import ready_app_client, request_body
from tests.service.tiny_models import CLASSIFICATION_LABELS, NER_LABELS, TinyModel

TASK_ROUTES = {
    "text-classification": ("/v1/text-classification", "TextClassificationRequest", "TextClassificationResponse"),
    "question-answering": ("/v1/question-answering", "QuestionAnsweringRequest", "QuestionAnsweringResponse"),
    "token-classification": ("/v1/token-classification", "TokenClassificationRequest", "TokenClassificationResponse"),
    "fill-mask": ("/v1/fill-mask", "FillMaskRequest", "FillMaskResponse"),
    "rerank": ("/v1/rerank", "RerankRequest", "RerankResponse"),
    "zero-shot-classification": (
        "/v1/zero-shot-classification",
        "ZeroShotClassificationRequest",
        "ZeroShotClassificationResponse",
    ),
}


def assert_error(response, status: int, error_type: str, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == error_type
    for word in words:
        assert word in body["error"]["message"]


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel]) -> Iterator[TestClient]:
    models = [f"{task}={model.bundle}" for task, model in tiny_models.items()]
    models.append(f"sentiment-b={tiny_models['text-classification'].bundle}")
    settings = Settings(
        models=models, max_body_bytes=4096, max_inputs_per_request=4, intra_op_threads=1, max_wait_ms=1.0
    )
    with ready_app_client(settings) as test_client:
        yield test_client


def test_models_lists_every_loaded_model(client: TestClient) -> None:
    cards = {card["name"]: card for card in client.get("/v1/models").json()["models"]}
    assert set(cards) == {*TASK_ROUTES, "sentiment-b"}
    assert cards["sentiment-b"]["task"] == "text-classification"
    assert cards["text-classification"]["labels"] == CLASSIFICATION_LABELS
    assert cards["token-classification"]["labels"] == NER_LABELS
    assert cards["fill-mask"]["labels"] == []
    assert all(
        card["max_length"] == 128 and card["quantization"] == "none" and card["ready"] for card in cards.values()
    )


def test_text_classification_single_and_list_inputs(client: TestClient) -> None:
    single = client.post("/v1/text-classification", json={"model": "sentiment-b", "inputs": "a great movie"})
    assert single.status_code == 200
    body = single.json()
    assert body["model"] == "sentiment-b" and len(body["results"]) == 1 and len(body["results"][0]) == 1
    assert body["results"][0][0]["label"] in CLASSIFICATION_LABELS
    many = client.post(
        "/v1/text-classification",
        json={"model": "text-classification", "inputs": ["good", {"text": "a", "text_pair": "b"}], "top_k": None},
    ).json()
    assert [len(result) for result in many["results"]] == [3, 3]
    scores = [item["score"] for item in many["results"][0]]
    assert scores == sorted(scores, reverse=True) and abs(sum(scores) - 1) < 1e-5


def test_question_answering_route(client: TestClient) -> None:
    context = "john lives in paris with his family."
    body = client.post(
        "/v1/question-answering", json={"inputs": {"question": "where does john live?", "context": context}, "top_k": 2}
    ).json()
    assert body["model"] == "question-answering" and len(body["results"]) == 1
    for answer in body["results"][0]:
        assert context[answer["start"] : answer["end"]] == answer["answer"]


def test_token_classification_route(client: TestClient) -> None:
    text = "john smith lives in paris"
    body = client.post(
        "/v1/token-classification", json={"inputs": [text, text], "aggregation_strategy": "none", "ignore_labels": []}
    ).json()
    assert len(body["results"]) == 2 and body["results"][0] == body["results"][1]
    for entity in body["results"][0]:
        assert entity["entity"] in NER_LABELS and text[entity["start"] : entity["end"]] == entity["word"].lstrip("#")


def test_token_classification_words_get_one_entry_each(client: TestClient) -> None:
    words = ["john", "smith", "lives", "in", "paris", "."]
    body = client.post("/v1/token-classification", json={"words": words}).json()
    assert body["model"] == "token-classification" and len(body["results"]) == 1
    (result,) = body["results"]
    text = " ".join(words)
    assert [entity["index"] for entity in result] == list(range(len(words)))
    assert [entity["word"] for entity in result] == words
    for entity in result:
        assert set(entity) == {"entity", "score", "index", "word", "start", "end"}
        assert entity["entity"] in NER_LABELS and 0 < entity["score"] <= 1
        assert text[entity["start"] : entity["end"]] == entity["word"]
    many = client.post("/v1/token-classification", json={"words": [words, ["paris"]], "stride": 4}).json()
    assert [len(item) for item in many["results"]] == [len(words), 1]
    assert [entity["entity"] for entity in many["results"][0]] == [entity["entity"] for entity in result]
    assert many["results"][1][0]["word"] == "paris" and many["results"][1][0]["start"] == 0


def test_token_classification_takes_exactly_one_of_inputs_and_words(client: TestClient) -> None:
    route = "/v1/token-classification"
    both = client.post(route, json={"inputs": "paris", "words": ["paris"]})
    assert_error(both, 422, "validation_error", "exactly one")
    assert_error(client.post(route, json={}), 422, "validation_error", "exactly one")
    assert_error(client.post(route, json={"words": []}), 422, "validation_error", "words")
    assert_error(client.post(route, json={"words": [[]]}), 422, "validation_error", "words")
    assert_error(client.post(route, json={"words": ["paris", ""]}), 422, "validation_error", "words")
    assert_error(client.post(route, json={"words": ["paris", ["in"]]}), 422, "validation_error", "words")
    for text_only in ({"ignore_labels": []}, {"aggregation_strategy": "none"}):
        rejected = client.post(route, json={"words": ["paris"], **text_only})
        assert_error(rejected, 422, "validation_error", *text_only)
    assert_error(client.post(route, json={"words": ["paris", "  "]}), 400, "bad_request", "word 1")
    assert_error(client.post(route, json={"words": [["paris"]] * 5}), 413, "payload_too_large", "5 inputs")


def test_fill_mask_route(client: TestClient) -> None:
    body = client.post("/v1/fill-mask", json={"inputs": "paris is the [MASK] of [MASK].", "top_k": 3}).json()
    assert len(body["results"]) == 1 and [len(mask) for mask in body["results"][0]] == [3, 3]
    assert all(isinstance(item["token"], int) for mask in body["results"][0] for item in mask)
    assert_error(client.post("/v1/fill-mask", json={"inputs": "no mask here"}), 400, "bad_request", "mask")


def test_model_selection_rules(client: TestClient) -> None:
    ambiguous = client.post("/v1/text-classification", json={"inputs": "x"})
    assert_error(ambiguous, 400, "bad_request", "sentiment-b", "text-classification")
    assert_error(
        client.post("/v1/text-classification", json={"model": "nope", "inputs": "x"}), 404, "model_not_found", "nope"
    )
    assert_error(
        client.post("/v1/text-classification", json={"model": "fill-mask", "inputs": "x"}),
        400,
        "bad_request",
        "fill-mask",
    )


def test_validation_errors_have_the_error_shape(client: TestClient) -> None:
    assert_error(client.post("/v1/fill-mask", json={"input": "x [MASK]"}), 422, "validation_error", "inputs")
    assert_error(client.post("/v1/fill-mask", json={"inputs": 5}), 422, "validation_error")
    assert_error(client.post("/v1/fill-mask", json={"inputs": []}), 422, "validation_error")
    assert_error(client.post("/v1/fill-mask", json={"inputs": "[MASK]", "top_k": 0}), 422, "validation_error", "top_k")
    for coerced in (True, 2.0, "2"):  # strict: nothing is silently turned into an integer
        assert_error(client.post("/v1/fill-mask", json={"inputs": "[MASK]", "top_k": coerced}), 422, "validation_error")
    huge = {"inputs": {"question": "q", "context": "c"}, "max_answer_len": 10**30}
    assert_error(client.post("/v1/question-answering", json=huge), 422, "validation_error", "max_answer_len")
    invalid_json = client.post("/v1/fill-mask", content=b"{nope", headers={"content-type": "application/json"})
    assert_error(invalid_json, 400, "bad_request", "not valid JSON", "at character 1")


def test_unknown_routes_and_methods_have_the_error_shape(client: TestClient) -> None:
    assert_error(client.get("/v1/nothing-here"), 404, "not_found")
    assert_error(client.get("/v1/fill-mask"), 405, "method_not_allowed")


def test_payload_limits_are_413(client: TestClient) -> None:
    big = {"model": "text-classification", "inputs": "word " * 2000}
    assert_error(client.post("/v1/text-classification", json=big), 413, "payload_too_large", "4096")

    def chunks() -> Iterator[bytes]:
        yield b'{"inputs": "'
        for _ in range(100):
            yield b"word " * 20
        yield b'"}'

    chunked = client.post("/v1/fill-mask", content=chunks(), headers={"content-type": "application/json"})
    assert_error(chunked, 413, "payload_too_large")
    too_many = client.post("/v1/fill-mask", json={"inputs": ["[MASK]"] * 5})
    assert_error(too_many, 413, "payload_too_large", "5 inputs", "4")
    # answered by the body limit before routing, yet labelled by the route's path, not "unmatched"
    assert 'bertserve_requests_total{route="/v1/text-classification",status="413"}' in client.get("/metrics").text


def test_health_routes(client: TestClient) -> None:
    assert client.get("/health/live").json() == {"status": "ok", "models": {}}
    ready = client.get("/health/ready").json()
    assert ready["status"] == "ok" and set(ready["models"]) == {*TASK_ROUTES, "sentiment-b"}


def test_metrics_expose_the_named_series(client: TestClient) -> None:
    client.post("/v1/fill-mask", json={"inputs": "the [MASK] was good."})
    client.get("/v1/unknown")
    text = client.get("/metrics").text
    assert 'bertserve_requests_total{route="/v1/fill-mask",status="200"}' in text
    assert 'bertserve_requests_total{route="unmatched",status="404"}' in text
    for series in (
        "bertserve_request_duration_seconds_bucket",
        "bertserve_requests_in_flight",
        'bertserve_queue_seconds_count{model="fill-mask",task="fill-mask"}',
        'bertserve_batch_size_bucket{le="1.0",model="fill-mask",task="fill-mask"}',
        'bertserve_batch_tokens_sum{model="fill-mask",task="fill-mask"}',
        'bertserve_batch_padding_ratio_count{model="fill-mask",task="fill-mask"}',
        'bertserve_padding_tokens_total{model="fill-mask",task="fill-mask"}',
        'bertserve_inference_seconds_count{model="fill-mask",task="fill-mask"}',
        'bertserve_queue_depth{model="fill-mask",task="fill-mask"}',
        'bertserve_queue_depth{model="sentiment-b",task="text-classification"}',
    ):
        assert series in text, series


def test_openapi_has_typed_models_with_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for path, request_model, response_model in TASK_ROUTES.values():
        operation = spec["paths"][path]["post"]
        name, body = request_body(spec, path)
        assert name == request_model and "title" not in body
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert ok.endswith(response_model)
        for status in ("400", "404", "413", "422", "429", "503", "504"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]["$ref"]
            assert error.endswith("ErrorResponse")
        assert body["examples"] and schemas[response_model]["examples"]
        if request_model == "TextClassificationRequest":  # a null survives FastAPI's writer (exclude_none)
            assert any("top_k" in example and example["top_k"] is None for example in body["examples"])
        if request_model == "TokenClassificationRequest":  # exactly one of inputs (texts) and words
            assert {"inputs", "words"} <= set(body["properties"])
        elif request_model == "RerankRequest":
            assert {"query", "documents"} <= set(body["required"])
        else:
            assert "inputs" in body["required"]
    assert spec["paths"]["/v1/models"]["get"]["responses"]["200"]["content"]["application/json"]["schema"][
        "$ref"
    ].endswith("ModelsResponse")
