"""The one inference entry (service.api.entry): every inference route of every protocol is answered there, in front
of FastAPI's router, with the bodies FastAPI's routes answered.

The routes FastAPI declares for them (OpenAPI, /docs, generated clients) have functions that raise if ever called,
so a 200 from any of them is the entry's answer. Its body rules are FastAPI's: ``validated_json_body`` is checked
against a FastAPI route on the same bodies, and the error bodies below are the bytes the routes answered; but JSON
itself is read by service.api.entry on every route (depth, items, numbers, duplicate keys, UTF-8: a 400 naming
the rule, in the protocol's error shape).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from starlette.exceptions import HTTPException

from service.api.bodies import is_json_media_type, validated_json_body, validation_error
from service.api.protocols import INFERENCE_ROUTES
from service.app import create_app
from service.errors import BadRequest, ServiceError, speaks_v2
from service.schemas.common import TaskRequest
from service.settings import Settings
from service.tasks.feature_extraction import EmbeddingsRequest
from service.tasks.text_classification import TextClassificationRequest
from service.tasks.token_classification import TokenClassificationRequest
from tests.service.apptools import ready_client, request_body
from tests.service.tiny_models import TinyModel

JSON = {"content-type": "application/json"}
LOADED = (
    "feature-extraction, fill-mask, question-answering, rerank, text-classification, token-classification, "
    "zero-shot-classification"
)
TEXT_TENSOR = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a fine film"]}]}
MASK_TENSOR = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a [MASK] day"]}]}
VALID: dict[str, tuple[str, dict[str, Any]]] = {  # route template -> (a path of it, a valid body)
    "/v1/text-classification": ("/v1/text-classification", {"inputs": "a fine film"}),
    "/v1/question-answering": (
        "/v1/question-answering",
        {"inputs": {"question": "Who?", "context": "Anna lives in Paris."}},
    ),
    "/v1/token-classification": ("/v1/token-classification", {"inputs": "John lives in Paris."}),
    "/v1/fill-mask": ("/v1/fill-mask", {"inputs": "Paris is the [MASK] of France."}),
    "/v1/zero-shot-classification": (
        "/v1/zero-shot-classification",
        {"inputs": "a cheap phone", "candidate_labels": ["price", "sport"]},
    ),
    "/v1/rerank": ("/v1/rerank", {"query": "where?", "documents": ["in paris", "a film"]}),
    "/v2/rerank": ("/v2/rerank", {"model": "rerank", "query": "where?", "documents": ["in paris", "a film"]}),
    "/v1/embed": ("/v1/embed", {"texts": ["hello world"], "input_type": "search_query"}),
    "/v2/embed": ("/v2/embed", {"texts": ["hello world"], "embedding_types": ["float", "ubinary"]}),
    "/v1/classify": ("/v1/classify", {"inputs": ["a fine film", "a dull one"]}),
    "/models/{name}": ("/models/text-classification", {"inputs": "a fine film", "parameters": {"top_k": 2}}),
    "/": ("/", {"inputs": "a fine film"}),
    "/rerank": ("/rerank", {"query": "where?", "texts": ["in paris", "a film"]}),
    "/v1/embeddings": ("/v1/embeddings", {"input": "hello world"}),
    "/embed": ("/embed", {"inputs": "hello world"}),
    "/similarity": ("/similarity", {"inputs": {"source_sentence": "hello world", "sentences": ["hi", "a film"]}}),
    "/v1/sentence-similarity": (
        "/v1/sentence-similarity",
        {"inputs": {"source_sentence": "hello world", "sentences": ["hi", "a film"]}},
    ),
    "/embed_sparse": ("/embed_sparse", {"inputs": "hello world"}),
    "/embed_all": ("/embed_all", {"inputs": "hello world"}),
    "/predict": ("/predict", {"model": "text-classification", "inputs": ["a fine film", "a dull one"]}),
    "/v2/models/{name}/infer": ("/v2/models/text-classification/infer", TEXT_TENSOR),
    "/v2/models/{name}/versions/{version}/infer": ("/v2/models/text-classification/versions/1/infer", TEXT_TENSOR),
}
# (path, body: JSON, or bytes sent as they are, headers, status, the exact body answered)
ERRORS: list[tuple[str, Any, dict[str, str], int, bytes]] = [
    ("/v1/text-classification", b'{"inputs": "x",', JSON, 400,
     b'{"error":{"type":"bad_request","message":"the body is not valid JSON at character 15: Expecting property '
     b'name enclosed in double quotes"}}'),
    ("/v1/text-classification", b'{"inputs": "x"}', {"content-type": "text/plain"}, 415,
     b'{"error":{"type":"unsupported_media_type","message":"the body must be JSON: send \'Content-Type: '
     b'application/json\' (not \'text/plain\')"}}'),
    ("/v1/text-classification", b'{"inputs": "x"}', {}, 415,
     b'{"error":{"type":"unsupported_media_type","message":"the body must be JSON: send \'Content-Type: '
     b'application/json\' (none was sent)"}}'),
    ("/v1/text-classification", b"", JSON, 400,
     b'{"error":{"type":"bad_request","message":"the body is empty: send a JSON object (the route\'s schema is at '
     b'/docs)"}}'),
    ("/v1/text-classification", {"inputs": "x", "top_k": 0}, JSON, 422,
     b'{"error":{"type":"validation_error","message":"body.top_k: Input should be greater than or equal to 1"}}'),
    ("/v1/text-classification", [1, 2], JSON, 422,
     b'{"error":{"type":"validation_error","message":"body: Input should be a valid dictionary or object to extract '
     b'fields from"}}'),
    ("/v1/text-classification", {"inputs": "x", "model": "nope"}, JSON, 404,
     b'{"error":{"type":"model_not_found","message":"no model named \'nope\' (loaded: ' + LOADED.encode() + b')"}}'),
    ("/v1/text-classification", b"[" * 5000 + b"]" * 5000, JSON, 400,
     b'{"error":{"type":"bad_request","message":"the body nests JSON more than 16 levels deep (arrays and '
     b'objects)"}}'),
    ("/v1/text-classification", b'{"inputs": "\xff"}', JSON, 400,
     b'{"error":{"type":"bad_request","message":"the body is not UTF-8: byte 12 (0xff) cannot start a '
     b'character"}}'),
    ("/v1/text-classification", {"inputs": ["x"] * 5}, JSON, 413,
     b'{"error":{"type":"payload_too_large","message":"5 inputs in one request; the limit is 4 '
     b'(max_inputs_per_request: --max-inputs-per-request, env BERTSERVE_MAX_INPUTS_PER_REQUEST)"}}'),
    ("/v1/fill-mask", {"inputs": "no mask here"}, JSON, 400,
     b'{"error":{"type":"bad_request","message":"no mask token ([MASK]) found in the input"}}'),
    ("/v1/embeddings", {"input": 5}, JSON, 422,
     b'{"error":{"type":"validation_error","message":"body.input: int 5 is none of the accepted types: str, '
     b'list[str]"}}'),
    ("/v1/text-classification", {"inputs": None}, JSON, 422,
     b'{"error":{"type":"validation_error","message":"body.inputs: null is none of the accepted types: str, '
     b'TextPair, list[union[str,TextPair]]"}}'),
    ("/v1/text-classification", {"inputs": ["a", {"text": "b"}]}, JSON, 422,
     b'{"error":{"type":"validation_error","message":"body.inputs.1.text_pair: Field required"}}'),
    ("/v1/embeddings", {"input": "x", "model": "fill-mask"}, JSON, 400,
     b'{"error":{"type":"bad_request","message":"model \'fill-mask\' serves fill-mask, not feature-extraction"}}'),
    ("/embed", b"", {}, 415,
     b'{"error":{"type":"unsupported_media_type","message":"the body must be JSON: send \'Content-Type: '
     b'application/json\' (none was sent)"}}'),
    ("/rerank", {"query": 1, "texts": ["a"]}, JSON, 422,
     b'{"error":{"type":"validation_error","message":"body.query: Input should be a valid string"}}'),
    ("/v2/models/nope/infer", TEXT_TENSOR, JSON, 404,
     b'{"error":"no model named \'nope\' (loaded: ' + LOADED.encode() + b')"}'),
    ("/v2/models/text-classification/versions/2/infer", TEXT_TENSOR, JSON, 404,
     b'{"error":"model \'text-classification\' has no version \'2\' (versions: 1)"}'),
    ("/v2/models/text-classification/infer", b'{"inputs": [', JSON, 400,
     b'{"error":"the body is not valid JSON at character 12: Expecting value"}'),
    ("/v2/models/text-classification/infer", {"inputs": []}, JSON, 422,
     b'{"error":"inputs: List should have at least 1 item after validation, not 0"}'),
    ("/v2/models/text-classification/infer", {**TEXT_TENSOR, "parameters": {"top_k": 0}}, JSON, 422,
     b'{"error":"top_k: Input should be greater than or equal to 1"}'),
]  # fmt: skip


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    from model_export.export import export_bundle
    from tests.model_export.sentence_models import make_encoder

    root = tmp_path_factory.mktemp("entry-embedding")
    embedding = export_bundle(
        make_encoder(root / "encoder", seed=3), root / "bundle", task="feature-extraction", token_embeddings=True
    )
    models = [f"{task}={model.bundle}" for task, model in tiny_models.items()]
    settings = Settings(
        models=[*models, f"feature-extraction={embedding.path}"],
        intra_op_threads=1,
        max_wait_ms=1.0,
        max_inputs_per_request=4,
    )
    with TestClient(create_app(settings)) as test_client:
        yield ready_client(test_client)


def post(client: TestClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    if isinstance(body, bytes):
        return client.post(path, content=body, headers=headers)
    return client.post(path, json=body, headers=headers)


def test_every_inference_route_is_answered_by_the_entry(client: TestClient) -> None:
    assert set(VALID) == {route.path for route in INFERENCE_ROUTES}
    for path, body in VALID.values():
        response = client.post(path, json=body)
        # several models here: POST / asks for one by name (test_hf_inference serves one)
        assert response.status_code == (400 if path == "/" else 200), (path, response.text)


@pytest.mark.parametrize(("path", "body", "headers", "status", "answer"), ERRORS, ids=[e[0] for e in ERRORS])
def test_invalid_requests_get_the_error_bodies_of_the_routes(
    client: TestClient, path: str, body: Any, headers: dict[str, str], status: int, answer: bytes
) -> None:
    response = post(client, path, body, headers)
    assert (response.status_code, response.content) == (status, answer)
    assert response.headers["content-type"] == "application/json"


def hostile_variants(body: dict[str, Any]) -> dict[str, tuple[bytes, str]]:
    """``body`` broken in each way the JSON rules refuse: the bytes, and the message's start."""
    first = next(iter(body))
    encoded = json.dumps(body).encode()
    extra = encoded[:-1] + b", "
    return {
        "17 levels": (json.dumps({**body, first: nest(body[first], 17)}).encode(), "the body nests JSON more than 16"),
        "100,000 levels": (b'{"%s": ' % first.encode() + b"[" * 100_000 + b"]" * 100_000 + b"}", "the body nests"),
        "duplicate key": (extra + b'"%s": null}' % first.encode(), f"the key {first!r} appears twice"),
        "1e999999": (extra + b'"x": 1e999999}', "the number 1e999999 is out of range"),
        "10**100000": (extra + b'"x": 1' + b"0" * 100_000 + b"}", "a number in the body is longer than 32"),
        "NaN": (extra + b'"x": NaN}', "NaN is not a JSON number"),
        "not UTF-8": (extra + b'"x": "\xff"}', "the body is not UTF-8"),
        "wide": (extra + b'"x": [' + b"1," * 40_000 + b"1]}", "the body holds 40"),
    }


def nest(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("route", list(VALID))
def test_json_that_breaks_the_rules_is_400_on_every_route_in_its_protocols_shape(
    client: TestClient, route: str
) -> None:
    path, body = VALID[route]
    within = post(client, path, {**body, "x": nest(1, 12)}, JSON)  # 13 levels: the schema may refuse it, not the rule
    if route != "/":  # POST / with several models served is a 400 asking for one, whatever the body
        assert within.status_code != 400 and within.status_code < 500, within.text
    for case, (hostile, message) in hostile_variants(body).items():
        response = client.post(path, content=hostile, headers=JSON)
        assert response.status_code == 400, (case, response.text)
        error = response.json()["error"]
        text = error if speaks_v2(route) else error["message"]
        assert isinstance(text, str) and text.startswith(message), (case, text)


def test_the_rules_apply_to_the_json_part_of_a_v2_body_with_binary_data(client: TestClient) -> None:
    tensor = {"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 8}}
    deep = json.dumps({"inputs": [tensor], "parameters": nest(1, 20)}).encode()
    binary = len(b"fine").to_bytes(4, "little") + b"fine"
    headers = {**JSON, "Inference-Header-Content-Length": str(len(deep))}
    response = client.post("/v2/models/text-classification/infer", content=deep + binary, headers=headers)
    assert response.status_code == 400 and response.json()["error"].startswith("the body nests JSON more than 16")
    fine = json.dumps({"inputs": [tensor]}).encode()
    headers = {**JSON, "Inference-Header-Content-Length": str(len(fine))}
    assert (
        client.post("/v2/models/text-classification/infer", content=fine + binary, headers=headers).status_code == 200
    )


def test_other_methods_on_inference_paths_are_fastapis_405(client: TestClient) -> None:
    for path in ("/v1/embeddings", "/v2/models/text-classification/infer"):
        response = client.get(path)
        assert response.status_code == 405 and "Method Not Allowed" in response.text


def test_requests_are_labelled_by_their_route_template(client: TestClient) -> None:
    def count(route: str, status: int) -> float:
        prefix = f'bertserve_requests_total{{route="{route}",status="{status}"}} '
        lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(prefix)]
        return float(lines[0].removeprefix(prefix)) if lines else 0.0

    labels = [
        ("/v1/fill-mask", 200, lambda: client.post("/v1/fill-mask", json={"inputs": "a [MASK] day"})),
        ("/v1/embeddings", 422, lambda: client.post("/v1/embeddings", json={"input": 5})),
        ("/v2/models/{name}/infer", 200, lambda: client.post("/v2/models/fill-mask/infer", json=MASK_TENSOR)),
        ("/v2/models/{name}/infer", 404, lambda: client.post("/v2/models/nope/infer", json=TEXT_TENSOR)),
    ]
    for route, status, call in labels:
        before = count(route, status)
        assert call().status_code == status
        assert count(route, status) == before + 1, route


def test_the_openapi_document_declares_every_inference_route(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    posted = {path for path, operations in spec["paths"].items() if "post" in operations}
    # TEI's /tokenize and /decode and Cohere's /v1/tokenize and /v1/detokenize run no model, nor do the model
    # repository's, the log and trace settings', the shared memory regions', the Batch API's and Cohere's dataset and
    # embed job routes (a batch's or a job's lines run later, in the batch runner): FastAPI serves them
    repository = {"/v2/repository/index", "/v2/repository/models/{name}/load", "/v2/repository/models/{name}/unload"}
    batch = {"/v1/files", "/v1/batches", "/v1/batches/{batch_id}/cancel"}
    batch |= {"/v1/datasets", "/v1/embed-jobs", "/v1/embed-jobs/{id}/cancel"}
    tokenizers = {"/tokenize", "/decode", "/v1/tokenize", "/v1/detokenize"}
    settings = {"/v2/logging", "/v2/trace/setting", "/v2/models/{name}/trace/setting"}
    regions = {f"/v2/{kind}sharedmemory{region}/{action}" for kind in ("system", "cuda")
               for region in ("", "/region/{name}") for action in ("register", "unregister")} - {
        "/v2/systemsharedmemory/register", "/v2/cudasharedmemory/register"}  # fmt: skip
    assert posted == {route.path for route in INFERENCE_ROUTES} | tokenizers | repository | batch | settings | regions
    for route in INFERENCE_ROUTES:
        operation = spec["paths"][route.path]["post"]
        assert operation["summary"] == route.operation.replace("_", " ").title()
        assert operation["tags"] == [route.tag]
        name, schema = request_body(spec, route.path)
        if route.body is not None:
            assert name == route.body.__name__
        else:
            assert "inputs" in schema["properties"]


def fastapi_route(model: type[TaskRequest]) -> TestClient:
    """A plain FastAPI route taking ``model`` as its body, its errors mapped as the app maps them."""
    app = FastAPI()

    async def route(body: TaskRequest) -> dict[str, Any]:
        return body.model_dump(mode="json")

    route.__annotations__["body"] = model
    app.add_api_route("/route", route, methods=["POST"])

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        error = validation_error(exc.errors(), request.headers.get("content-type"))
        return JSONResponse(error.body(), status_code=error.status_code)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return JSONResponse({"error": {"type": "bad_request", "message": exc.detail}}, status_code=exc.status_code)

    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(HTTPException, http_error)
    return TestClient(app)


# Bodies within service.api.entry: those it refuses (NaN, not UTF-8, too deep, ...) are in test_json_rules.py.
BODIES: list[tuple[bytes, str | None]] = [
    (b'{"inputs": "x"}', "application/json"),
    (b'{"inputs": ["a", {"text": "b", "text_pair": "c"}], "top_k": null}', "application/json; charset=utf-8"),
    (b'{"inputs": "x"}', "application/vnd.api+json"),
    (b'{"inputs": "x"}', "APPLICATION/JSON"),
    (b'{"inputs": "x"}', "text/plain"),
    (b'{"inputs": "x"}', "application/x-www-form-urlencoded"),
    (b'{"inputs": "x"}', None),
    (b'{"inputs": "x"}', ""),
    (b"", "application/json"),
    (b"", None),
    (b"null", "application/json"),
    (b'"text"', "application/json"),
    (b'{"inputs": "x",', "application/json"),
    (b'{"inputs": "x"} trailing', "application/json"),
    (b'{"inputs": {"text": "a"}}', "application/json"),
    (b'{"inputs": "x", "top_k": true}', "application/json"),
    (b'{"inputs": "x", "top_k": "2"}', "application/json"),
    (b'{"inputs": "x", "extra": 1}', "application/json"),
    (b'{"inputs": [1, 2, 3, 4, 5, 6, 7]}', "application/json"),
    (b'{"input": 5, "encoding_format": "hex"}', "application/json"),
    (b'{"inputs": "paris", "words": ["paris"]}', "application/json"),
    (b'{"words": ["paris", ["in"]]}', "application/json"),
]


@pytest.mark.parametrize("model", [TextClassificationRequest, EmbeddingsRequest, TokenClassificationRequest])
def test_a_json_body_is_read_as_fastapi_reads_a_route_body(model: type[TaskRequest]) -> None:
    route = fastapi_route(model)
    for body, content_type in BODIES:
        headers = {} if content_type is None else {"content-type": content_type}
        if not body and content_type is not None and is_json_media_type(content_type):
            # One departure from FastAPI (its 422 "body: Field required"): an empty JSON body is a 400, as invalid
            # JSON is.
            with pytest.raises(BadRequest, match="the body is empty: send a JSON object"):
                validated_json_body(model, body, content_type)
            continue
        theirs = route.post("/route", content=body, headers=headers)
        try:
            ours = (200, validated_json_body(model, body, content_type).model_dump(mode="json"))
        except ServiceError as error:
            ours = (error.status_code, error.body())
        assert ours == (theirs.status_code, theirs.json()), (body[:40], content_type)
