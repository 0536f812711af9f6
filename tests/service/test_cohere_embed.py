"""Cohere's embed through Cohere's own clients (``cohere.Client.embed``, ``/v1/embed``; ``cohere.ClientV2.embed``,
``/v2/embed``) against a real server on a sentence-transformers model with named prompts. The oracle is
sentence-transformers itself: ``input_type`` search_query / search_document equal its ``encode_query`` /
``encode_document``, the other types its prompt of that name, binary and ubinary its ``quantize_embeddings``,
``output_dimension`` its ``truncate_dim`` and ``max_tokens`` its ``max_seq_length``."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.service.apptools import real_server_for

cohere = pytest.importorskip("cohere")
st = pytest.importorskip("sentence_transformers")
pytest.importorskip("transformers")

from sentence_transformers.util.quantization import quantize_embeddings  # noqa: E402

from model_export.export import export_bundle  # noqa: E402
from model_export.family_checkpoints import build_family_checkpoint  # noqa: E402

PROMPTS = {"query": "query: ", "passage": "passage: ", "classification": "classify: "}
TEXTS = ["Who lives in Paris?", "John Smith lives in Paris and works for the bank.", "a dog runs"]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 60)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cohere")
    encoder = build_family_checkpoint("bert", "feature-extraction", root / "encoder")
    checkpoint = root / "checkpoint"
    st.SentenceTransformer(str(encoder), device="cpu", prompts=PROMPTS).save(str(checkpoint))
    return checkpoint, export_bundle(checkpoint, root / "bundle", task="feature-extraction").path


@pytest.fixture(scope="module")
def oracle(model: tuple[Path, Path]):  # type: ignore[no-untyped-def]
    return st.SentenceTransformer(str(model[0]), device="cpu")


@pytest.fixture(scope="module")
def server_url(model: tuple[Path, Path]) -> Iterator[str]:
    with real_server_for({"embed": model[1]}, tune=False) as url:
        yield url


def test_input_types_pick_the_prompts_sentence_transformers_would(server_url: str, oracle) -> None:  # type: ignore[no-untyped-def]
    client = cohere.Client(base_url=server_url, api_key="unused")
    expected = {
        "search_query": oracle.encode_query(TEXTS),
        "search_document": oracle.encode_document(TEXTS),  # "passage", the first of document / passage / corpus
        "classification": oracle.encode(TEXTS, prompt_name="classification"),
        "clustering": oracle.encode(TEXTS),  # no prompt of that name: the default (none here)
        None: oracle.encode(TEXTS),
    }
    assert not np.allclose(expected["search_query"], expected["search_document"], atol=1e-3)
    for input_type, vectors in expected.items():
        answer = client.embed(texts=TEXTS, model="embed", **({"input_type": input_type} if input_type else {}))
        assert answer.response_type == "embeddings_floats" and answer.texts == TEXTS
        np.testing.assert_allclose(np.array(answer.embeddings), vectors, atol=1e-5, err_msg=str(input_type))


def test_v1_by_type_and_the_clients_own_batches_of_96(server_url: str, oracle) -> None:  # type: ignore[no-untyped-def]
    client = cohere.Client(base_url=server_url, api_key="unused")
    texts = [f"sentence number {index} about {TEXTS[index % 3]}" for index in range(100)]
    answer = client.embed(texts=texts, model="embed", input_type="search_query", embedding_types=["float", "ubinary"])
    assert answer.response_type == "embeddings_by_type" and len(answer.id.split(", ")) == 2  # two calls, merged
    floats = oracle.encode_query(texts)
    np.testing.assert_allclose(np.array(answer.embeddings.float_), floats, atol=1e-5)
    assert np.array_equal(np.array(answer.embeddings.ubinary), quantize_embeddings(floats, precision="ubinary"))


def test_v2_types_dimension_and_token_cap(server_url: str, oracle) -> None:  # type: ignore[no-untyped-def]
    client = cohere.ClientV2(base_url=server_url, api_key="unused")
    types = ["float", "binary", "ubinary", "base64"]
    answer = client.embed(
        texts=TEXTS, model="embed", input_type="search_document", embedding_types=types, output_dimension=16
    )
    floats = oracle.encode_document(TEXTS, truncate_dim=16)
    got = answer.embeddings
    np.testing.assert_allclose(np.array(got.float_), floats, atol=1e-5)
    assert np.array_equal(np.array(got.binary), quantize_embeddings(floats, precision="binary"))
    assert np.array_equal(np.array(got.ubinary), quantize_embeddings(floats, precision="ubinary"))
    decoded = [np.frombuffer(base64.b64decode(item), dtype="<f4") for item in got.base64]
    np.testing.assert_array_equal(np.stack(decoded), np.array(got.float_, dtype=np.float32))
    assert answer.meta.api_version.version == "2" and answer.texts == TEXTS
    plain = client.embed(texts=TEXTS, model="embed", input_type="clustering")
    np.testing.assert_allclose(np.array(plain.embeddings.float_), oracle.encode(TEXTS), atol=1e-5)

    capped = client.embed(texts=[LONG], model="embed", input_type="clustering", max_tokens=6)
    oracle.max_seq_length, length = 6, oracle.max_seq_length
    try:
        np.testing.assert_allclose(np.array(capped.embeddings.float_), oracle.encode([LONG]), atol=1e-5)
    finally:
        oracle.max_seq_length = length
    assert capped.meta.billed_units.input_tokens == 6


def test_truncation_and_the_tokens_billed(server_url: str, oracle) -> None:  # type: ignore[no-untyped-def]
    client = cohere.Client(base_url=server_url, api_key="unused")
    end = np.array(client.embed(texts=[LONG], model="embed").embeddings)
    np.testing.assert_allclose(end, oracle.encode([LONG]), atol=1e-5)  # END: sentence-transformers' own cut
    tei = httpx.post(f"{server_url}/embed", json={"inputs": LONG, "truncate": True, "truncation_direction": "Left",
                                                  "normalize": False}).json()  # fmt: skip
    start = np.array(client.embed(texts=[LONG], model="embed", truncate="START").embeddings)
    np.testing.assert_allclose(start, np.array(tei), atol=1e-6)
    assert not np.allclose(start, end, atol=1e-3)
    with pytest.raises(cohere.errors.BadRequestError) as refused:
        client.embed(texts=["short", LONG], model="embed", truncate="NONE")
    assert "input 1 is" in str(refused.value.body) and "truncate: END or START" in str(refused.value.body)
    openai = httpx.post(f"{server_url}/v1/embeddings", json={"input": TEXTS, "model": "embed"}).json()
    billed = client.embed(texts=TEXTS, model="embed").meta.billed_units.input_tokens
    assert billed == openai["usage"]["prompt_tokens"] > len(TEXTS) * 2


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"texts": TEXTS, "embedding_types": ["int8"]}, "int8 and uint8 need quantization ranges calibrated"),
        ({"texts": TEXTS, "images": ["data:image/png;base64,AAAA"]}, "images are not embedded"),
        ({"texts": TEXTS, "input_type": "image"}, "input_type image is not taken"),
        ({"texts": TEXTS, "inputs": [{"content": [{"type": "text", "text": "a"}]}]}, "inputs (mixed text and image"),
        ({"texts": TEXTS, "truncate": "MIDDLE"}, "truncate"),
        ({"texts": []}, "texts"),
    ],
)
def test_what_is_not_taken_is_a_422_naming_it(server_url: str, body: dict, words: str) -> None:
    response = httpx.post(f"{server_url}/v2/embed", json={"model": "embed", **body})
    assert response.status_code == 422, response.text
    assert words in response.text


def test_errors_reach_the_clients_as_cohere_errors(server_url: str) -> None:
    client = cohere.ClientV2(base_url=server_url, api_key="unused")
    with pytest.raises(cohere.errors.UnprocessableEntityError):
        client.embed(texts=TEXTS, model="embed", input_type="search_query", embedding_types=["uint8"])
    with pytest.raises(cohere.core.api_error.ApiError) as missing:
        client.embed(texts=TEXTS, model="nope", input_type="search_query")
    assert missing.value.status_code == 404
    assert "no model named 'nope'" in missing.value.body["error"]["message"]  # the service's shape, not OIP v2's


@pytest.mark.parametrize(
    ("prompts", "input_type", "chosen"),
    [
        ({"query": "q: ", "search_query": "sq: "}, "search_query", "q: "),  # sentence-transformers' name first
        ({"search_query": "sq: ", "search_document": "sd: "}, "search_query", "sq: "),  # nomic-embed's names
        ({"corpus": "c: ", "search_document": "sd: "}, "search_document", "c: "),
        ({"document": "d: ", "passage": "p: "}, "search_document", "d: "),
        ({"query": "q: "}, "clustering", "default: "),
        ({"query": "q: "}, None, "default: "),
    ],
)
def test_the_prompt_an_input_type_picks(model: tuple[Path, Path], prompts: dict, input_type: str | None,
                                        chosen: str) -> None:  # fmt: skip
    import dataclasses

    from contract.bundle import read_bundle
    from service.tasks.base import ModelContext
    from service.tasks.feature_extraction import EmbeddingParams, FeatureExtractionHandler

    context = ModelContext.from_bundle(read_bundle(model[1]), default_prompt="default: ")
    context = dataclasses.replace(context, prompts=prompts)
    [prepared] = FeatureExtractionHandler().prepare(context, ["x"], EmbeddingParams(input_type=input_type))
    expected = context.tokenizer.encode(chosen + "x").ids
    assert prepared.sequences[0].input_ids.tolist() == expected


def test_a_token_cap_that_leaves_no_room_for_text_is_a_400(server_url: str) -> None:
    body = {"model": "embed", "texts": TEXTS, "max_tokens": 2}
    response = httpx.post(f"{server_url}/v2/embed", json=body)
    assert response.status_code == 400
    message = "max_tokens 2 leaves no room for text: the model adds 2 special tokens"
    assert response.json()["error"]["message"] == message
    assert httpx.post(f"{server_url}/v2/embed", json={**body, "max_tokens": 3}).status_code == 200
