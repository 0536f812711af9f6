"""Embeddings end to end on tiny sentence-transformers models: /v1/embeddings (OpenAI) and /embed (TEI).

The oracle is sentence-transformers itself, loading the folder the bundle was exported from; the OpenAI route is
also driven by the official ``openai`` client against a real uvicorn server.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.settings import Settings
from tests.service.apptools import bundles_server, ready_app_client, request_body
from tests.service.embedding_checks import assert_same_neighbours, cosines

SENTENCES = [
    "the man went to the city.",
    "a man went to the old city",
    "the film was terrible and boring",
    "what a wonderful movie, the music was great!",
    "john saw mary in paris on monday",
    "mary and john went to london",
    "the river runs by the bank",
    "the team won the game",
]
LONG_TEXT = "the story of a family in the city " * 40  # ~280 tokens: over the tiny models' 128
HIDDEN = 32


@pytest.fixture(scope="module")
def sentence_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Saved sentence-transformers folders: mean + Normalize (as all-MiniLM-L6-v2), and CLS without Normalize."""
    from tests.model_export.sentence_models import make_sentence_transformer

    root = tmp_path_factory.mktemp("sentence-models")
    return {
        "mean": make_sentence_transformer(root / "mean", "mean", normalize=True, seed=0),
        "cls": make_sentence_transformer(root / "cls", "cls", normalize=False, seed=1),
    }


@pytest.fixture(scope="module")
def bundles(sentence_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Model name -> bundle, every one exported with --pooling auto (read from modules.json)."""
    from model_export.export import export_bundle

    root = tmp_path_factory.mktemp("embedding-bundles")
    return {
        "mean": export_bundle(sentence_models["mean"], root / "mean").path,
        "mean-int8": export_bundle(sentence_models["mean"], root / "mean-int8", quantize="int8").path,
        "cls": export_bundle(sentence_models["cls"], root / "cls").path,
    }


@pytest.fixture(scope="module")
def oracle(sentence_models: dict[str, Path]) -> dict[str, np.ndarray]:
    """sentence-transformers' own vectors for SENTENCES and LONG_TEXT, per model folder."""
    from tests.model_export.sentence_models import load_sentence_transformer

    vectors = {}
    for name, folder in sentence_models.items():
        model = load_sentence_transformer(folder)
        vectors[name] = model.encode([*SENTENCES, LONG_TEXT], convert_to_numpy=True)
    return vectors


# A real uvicorn server (in a thread) serving the three embedding bundles. max_inputs_per_request: the v1 task routes'
# limit; embeddings have their own (max_embedding_inputs).
server_url = bundles_server(max_inputs_per_request=4, timeout_s=20)


@pytest.fixture(scope="module")
def http(server_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server_url, timeout=30) as client:
        yield client


def openai_vectors(http: httpx.Client, model: str, texts: list[str] | str, **options: object) -> np.ndarray:
    response = http.post("/v1/embeddings", json={"model": model, "input": texts, **options})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [item["index"] for item in body["data"]] == list(range(len(body["data"])))
    return np.array([item["embedding"] for item in body["data"]], dtype=np.float32)


def tei_vectors(http: httpx.Client, model: str, texts: list[str] | str, **options: object) -> np.ndarray:
    response = http.post("/embed", json={"model": model, "inputs": texts, **options})
    assert response.status_code == 200, response.text
    return np.array(response.json(), dtype=np.float32)


def assert_error(response: httpx.Response, status: int, error_type: str, *words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == error_type
    for word in words:
        assert word in error["message"], error["message"]


def test_fp32_vectors_match_sentence_transformers(http: httpx.Client, oracle: dict[str, np.ndarray]) -> None:
    got = openai_vectors(http, "mean", SENTENCES)
    expected = oracle["mean"][: len(SENTENCES)]
    assert got.shape == (len(SENTENCES), HIDDEN)
    assert cosines(expected, got).min() >= 0.9999
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)  # Normalize is in the graph
    assert_same_neighbours(expected, got)
    np.testing.assert_array_equal(tei_vectors(http, "mean", SENTENCES), got)


def test_int8_vectors_keep_their_direction(http: httpx.Client, oracle: dict[str, np.ndarray]) -> None:
    got = openai_vectors(http, "mean-int8", SENTENCES)
    assert cosines(oracle["mean"][: len(SENTENCES)], got).min() >= 0.99


def test_cls_pooling_without_normalize(http: httpx.Client, oracle: dict[str, np.ndarray]) -> None:
    expected = oracle["cls"][: len(SENTENCES)]
    raw = openai_vectors(http, "cls", SENTENCES)  # OpenAI route: the vectors as the model gives them
    np.testing.assert_allclose(raw, expected, rtol=0, atol=1e-5)
    assert np.abs(np.linalg.norm(raw, axis=-1) - 1).max() > 1e-2  # this model does not normalise
    assert_same_neighbours(expected, raw)
    unit = expected / np.linalg.norm(expected, axis=-1, keepdims=True)
    np.testing.assert_allclose(tei_vectors(http, "cls", SENTENCES), unit, rtol=0, atol=1e-5)  # TEI: normalize=true
    np.testing.assert_allclose(tei_vectors(http, "cls", SENTENCES, normalize=False), expected, rtol=0, atol=1e-5)
    # dimensions on a model that does not normalise: the first values, as they are.
    np.testing.assert_allclose(openai_vectors(http, "cls", SENTENCES, dimensions=8), raw[:, :8], rtol=0, atol=1e-7)


def test_base64_is_the_float32_bytes_of_the_float_answer(http: httpx.Client) -> None:
    floats = openai_vectors(http, "mean", SENTENCES[:3])
    response = http.post("/v1/embeddings", json={"model": "mean", "input": SENTENCES[:3], "encoding_format": "base64"})
    assert response.status_code == 200, response.text
    encoded = [item["embedding"] for item in response.json()["data"]]
    assert all(isinstance(item, str) for item in encoded)
    decoded = np.stack([np.frombuffer(base64.b64decode(item), dtype="<f4") for item in encoded])
    np.testing.assert_array_equal(decoded, floats)


def test_dimensions_cut_and_renormalise(http: httpx.Client) -> None:
    full = openai_vectors(http, "mean", SENTENCES[:4])
    cut = openai_vectors(http, "mean", SENTENCES[:4], dimensions=8)
    assert cut.shape == (4, 8)
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=-1, keepdims=True)
    np.testing.assert_allclose(cut, expected, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(openai_vectors(http, "mean", SENTENCES[:4], dimensions=HIDDEN), full)
    response = http.post("/v1/embeddings", json={"model": "mean", "input": "hello", "dimensions": HIDDEN + 1})
    assert_error(response, 400, "bad_request", f"dimensions {HIDDEN + 1}", f"model's {HIDDEN}")
    response = http.post("/v1/embeddings", json={"model": "mean", "input": "hello", "dimensions": 0})
    assert_error(response, 422, "validation_error", "dimensions")


def test_response_shape_and_usage(http: httpx.Client, bundles: dict[str, Path]) -> None:
    from tokenizers import Tokenizer

    response = http.post("/v1/embeddings", json={"model": "mean", "input": SENTENCES[0], "user": "someone"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"object", "data", "model", "usage"}
    assert (body["object"], body["model"]) == ("list", "mean")
    assert [set(item) for item in body["data"]] == [{"object", "index", "embedding"}]
    assert body["data"][0]["object"] == "embedding" and len(body["data"][0]["embedding"]) == HIDDEN
    tokenizer = Tokenizer.from_file(str(bundles["mean"] / "tokenizer.json"))
    tokens = sum(len(tokenizer.encode(text).ids) for text in SENTENCES)
    usage = http.post("/v1/embeddings", json={"model": "mean", "input": SENTENCES}).json()["usage"]
    assert usage == {"prompt_tokens": tokens, "total_tokens": tokens}


def test_tei_embed_shape(http: httpx.Client) -> None:
    single = http.post("/embed", json={"model": "mean", "inputs": SENTENCES[0]})
    assert single.status_code == 200, single.text
    assert np.array(single.json()).shape == (1, HIDDEN)  # a list of lists, also for one text
    assert tei_vectors(http, "mean", SENTENCES[:3]).shape == (3, HIDDEN)


def test_long_texts_truncate_on_openai_and_only_when_asked_on_tei(
    http: httpx.Client, oracle: dict[str, np.ndarray]
) -> None:
    response = http.post("/embed", json={"model": "mean", "inputs": [SENTENCES[0], LONG_TEXT]})
    assert_error(response, 400, "bad_request", "input 1 is", "tokens long", "at most 128", "truncate")
    truncated = tei_vectors(http, "mean", [LONG_TEXT], truncate=True)
    np.testing.assert_array_equal(openai_vectors(http, "mean", [LONG_TEXT]), truncated)  # OpenAI route truncates
    assert cosines(oracle["mean"][-1:], truncated).min() >= 0.9999  # as sentence-transformers truncates
    left = tei_vectors(http, "mean", [LONG_TEXT + " john saw mary"], truncate=True, truncation_direction="Left")
    right = tei_vectors(http, "mean", [LONG_TEXT + " john saw mary"], truncate=True)
    assert cosines(left, right).min() < 0.9999  # the other end was kept


def test_models_lists_embedding_models_in_both_shapes(http: httpx.Client) -> None:
    body = http.get("/v1/models").json()
    cards = {card["name"]: card for card in body["models"]}
    assert set(cards) == {"mean", "mean-int8", "cls"}
    assert {card["task"] for card in cards.values()} == {"feature-extraction"}
    assert cards["mean-int8"]["quantization"] == "int8"
    assert body["object"] == "list"
    assert {item["id"] for item in body["data"]} == set(cards)
    assert all(item["object"] == "model" and item["created"] > 0 for item in body["data"])


@pytest.mark.parametrize(
    ("route", "body", "status", "words"),
    [
        (
            "/v1/embeddings",
            {"model": "mean", "input": [[101, 2023, 102]]},
            422,
            ("body.input", "token-id arrays are not taken", "check_embedding_ctx_length=False"),
        ),
        ("/v1/embeddings", {"model": "mean", "input": [101, 2023, 102]}, 422, ("token-id arrays are not taken",)),
        ("/v1/embeddings", {"model": "mean", "input": [None]}, 422, ("body.input",)),
        ("/v1/embeddings", {"model": "mean", "input": []}, 422, ("input",)),
        ("/v1/embeddings", {"model": "mean", "input": "x", "encoding_format": "int8"}, 422, ("encoding_format",)),
        ("/v1/embeddings", {"model": "mean", "input": "x", "surprise": 1}, 422, ("surprise",)),
        ("/v1/embeddings", {"input": "x"}, 400, ("several models serve feature-extraction",)),
        ("/v1/embeddings", {"model": "nope", "input": "x"}, 404, ("no model named 'nope'",)),
        ("/embed", {"model": "mean", "inputs": "x", "normalize": "yes"}, 422, ("normalize",)),
        ("/embed", {"model": "mean", "inputs": "x", "truncation_direction": "middle"}, 422, ("truncation_direction",)),
        ("/v1/embeddings", {"model": "mean", "input": ["a text", ""]}, 400, ("input 1 is empty",)),
        ("/embed", {"model": "mean", "inputs": "  "}, 400, ("input 0 is empty",)),
    ],
)
def test_bad_requests(http: httpx.Client, route: str, body: dict, status: int, words: tuple[str, ...]) -> None:
    response = http.post(route, json=body)
    assert response.status_code == status, response.text
    for word in words:
        assert word in response.json()["error"]["message"]


def test_openai_client(server_url: str, http: httpx.Client) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", max_retries=0)
    expected = tei_vectors(http, "mean", SENTENCES)
    as_floats = client.embeddings.create(model="mean", input=SENTENCES, encoding_format="float")
    as_base64 = client.embeddings.create(model="mean", input=SENTENCES)  # the client asks for base64 by default
    for response in (as_floats, as_base64):
        assert response.model == "mean" and [item.index for item in response.data] == list(range(len(SENTENCES)))
        np.testing.assert_array_equal(np.array([item.embedding for item in response.data], np.float32), expected)
        assert response.usage.prompt_tokens == response.usage.total_tokens > len(SENTENCES)
    one = client.embeddings.create(model="mean", input=SENTENCES[0], dimensions=8)
    assert len(one.data) == 1 and len(one.data[0].embedding) == 8
    assert np.linalg.norm(one.data[0].embedding) == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(openai.BadRequestError, match=f"dimensions {HIDDEN + 1} is more than"):
        client.embeddings.create(model="mean", input="hello", dimensions=HIDDEN + 1)
    with pytest.raises(openai.UnprocessableEntityError, match="token-id arrays are not taken"):
        client.embeddings.create(model="mean", input=[[101, 2023, 102]])  # what LangChain's OpenAIEmbeddings sends
    with pytest.raises(openai.NotFoundError, match="no model named 'text-embedding-3-small'"):
        client.embeddings.create(model="text-embedding-3-small", input="hello")
    assert {model.id for model in client.models.list()} == {"mean", "mean-int8", "cls"}


def test_embeddings_have_their_own_input_limit(bundles: dict[str, Path]) -> None:
    settings = Settings(
        models=[f"mean={bundles['mean']}"],
        intra_op_threads=1,
        max_inputs_per_request=1,  # the v1 task routes' limit does not apply to embeddings
        max_queue=2,  # an embedding model's queue holds one request of max_embedding_inputs rows
        max_embedding_inputs=6,
    )
    with ready_app_client(settings) as client:
        six = SENTENCES[:6]
        assert len(client.post("/v1/embeddings", json={"input": six}).json()["data"]) == 6
        assert len(client.post("/embed", json={"inputs": six}).json()) == 6
        for route, field in (("/v1/embeddings", "input"), ("/embed", "inputs")):
            response = client.post(route, json={field: SENTENCES[:7]})
            named = "(max_embedding_inputs: --max-embedding-inputs, env BERTSERVE_MAX_EMBEDDING_INPUTS)"
            assert_error(response, 413, "payload_too_large", f"7 inputs in one request; the limit is 6 {named}")


def test_openapi_documents_both_routes(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    for path, request_model, response_model in (
        ("/v1/embeddings", "EmbeddingsRequest", "EmbeddingsResponse"),
        ("/embed", "TeiEmbedRequest", "TeiEmbedResponse"),
    ):
        operation = spec["paths"][path]["post"]
        name, body = request_body(spec, path)
        assert name == request_model
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(response_model)
        for status in ("400", "404", "413", "422", "429", "503", "504"):
            assert operation["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith(
                "ErrorResponse"
            )
        assert body["examples"] and spec["components"]["schemas"][response_model]["examples"]
