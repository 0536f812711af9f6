"""Cohere's embed through Cohere's own clients (``cohere.Client.embed``, ``/v1/embed``; ``cohere.ClientV2.embed``,
``/v2/embed``) against a real server on a sentence-transformers model with named prompts. The oracle is
sentence-transformers itself: ``input_type`` search_query / search_document equal its ``encode_query`` /
``encode_document``, the other types its prompt of that name, binary and ubinary its ``quantize_embeddings``,
``output_dimension`` its ``truncate_dim`` and ``max_tokens`` its ``max_seq_length``."""

from __future__ import annotations

import base64
import json
import shutil
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


CALIBRATION = [
    f"{subject} {verb} {place}"
    for subject in ("a man", "the team", "my dog", "John Smith", "she")
    for verb in ("lives in", "runs to", "won the game in", "writes about")
    for place in ("Paris", "the park")
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cohere")
    encoder = build_family_checkpoint("bert", "feature-extraction", root / "encoder")
    checkpoint = root / "checkpoint"
    st.SentenceTransformer(str(encoder), device="cpu", prompts=PROMPTS).save(str(checkpoint))
    texts = root / "calibration.txt"
    texts.write_text("\n".join(CALIBRATION) + "\n\n")
    bundle = export_bundle(checkpoint, root / "bundle", task="feature-extraction", embedding_calibration=texts)
    return checkpoint, bundle.path


def variant(bundle: Path, folder: Path, **changes: object) -> Path:
    """A copy of ``bundle`` whose bundle.json has ``changes`` (its hashed graph and tokenizer as they are)."""
    shutil.copytree(bundle, folder)
    spec = json.loads((folder / "bundle.json").read_text())
    (folder / "bundle.json").write_text(json.dumps({**spec, **changes}))
    return folder


@pytest.fixture(scope="module")
def oracle(model: tuple[Path, Path]):  # type: ignore[no-untyped-def]
    return st.SentenceTransformer(str(model[0]), device="cpu")


@pytest.fixture(scope="module")
def server_url(model: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("variants")
    bundles = {
        "embed": model[1],
        "uncalibrated": variant(model[1], root / "uncalibrated", embedding_ranges=[]),
        "normalized": variant(model[1], root / "normalized", normalize=True),  # read as a normalising graph
    }
    with real_server_for(bundles, tune=False) as url:
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
    left = {"inputs": LONG, "model": "embed", "truncate": True, "truncation_direction": "Left", "normalize": False}
    tei = httpx.post(f"{server_url}/embed", json=left).json()
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
        client.embed(texts=TEXTS, model="embed", input_type="search_query", embedding_types=["float64"])
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


def test_int8_and_uint8_are_buckets_of_the_ranges_the_export_calibrated(server_url: str, model, oracle) -> None:  # type: ignore[no-untyped-def]
    ranges = np.array(json.loads((model[1] / "bundle.json").read_text())["embedding_ranges"])
    calibration = oracle.encode(CALIBRATION)  # sentence-transformers' calibration_embeddings of the same texts
    np.testing.assert_allclose(ranges, np.stack([calibration.min(axis=0), calibration.max(axis=0)]), atol=1e-5)
    client = cohere.ClientV2(base_url=server_url, api_key="unused")
    for dimensions in (None, 16):
        answer = client.embed(texts=TEXTS, model="embed", input_type="search_query", output_dimension=dimensions,
                              embedding_types=["float", "int8", "uint8"]).embeddings  # fmt: skip
        floats, cut = np.array(answer.float_, dtype=np.float32), ranges[:, : dimensions or ranges.shape[1]]
        for precision in ("int8", "uint8"):
            expected = quantize_embeddings(floats, precision=precision, ranges=cut)
            assert np.array_equal(np.array(getattr(answer, precision)), expected), (precision, dimensions)
    spread = np.array(client.embed(texts=CALIBRATION, model="embed", input_type="clustering",
                                   embedding_types=["uint8"]).embeddings.uint8)  # fmt: skip
    assert spread.min() == 0 and spread.max() == 255  # the calibration texts span each range


def test_int8_without_ranges_or_on_a_cut_normalised_vector_is_a_400(server_url: str) -> None:
    client = cohere.ClientV2(base_url=server_url, api_key="unused")
    with pytest.raises(cohere.errors.BadRequestError) as uncalibrated:
        client.embed(texts=TEXTS, model="uncalibrated", input_type="search_query", embedding_types=["int8"])
    assert "has no int8 / uint8 quantization ranges: export it with --embedding-calibration" in str(
        uncalibrated.value.body
    )
    with pytest.raises(cohere.errors.BadRequestError) as cut:
        client.embed(texts=TEXTS, model="normalized", input_type="search_query", embedding_types=["uint8"],
                     output_dimension=16)  # fmt: skip
    assert "the cut vectors are normalised again" in str(cut.value.body)
    whole = client.embed(texts=TEXTS, model="normalized", input_type="search_query", embedding_types=["uint8"])
    assert len(whole.embeddings.uint8) == len(TEXTS)
    plain = client.embed(texts=TEXTS, model="uncalibrated", input_type="search_query", embedding_types=["binary"])
    assert len(plain.embeddings.binary) == len(TEXTS)


def test_calibration_files_and_ranges_are_checked(model, tmp_path: Path, tiny_models) -> None:  # type: ignore[no-untyped-def]
    from contract.bundle import BundleError, read_bundle
    from model_export.validate import ExportError

    lonely = tmp_path / "one.txt"
    lonely.write_text("only one text\n\n")
    with pytest.raises(ExportError, match=r"one\.txt: 1 texts; give at least two"):
        export_bundle(model[0], tmp_path / "b1", task="feature-extraction", embedding_calibration=lonely)
    with pytest.raises(ExportError, match="embedding_calibration apply to feature-extraction only, not fill-mask"):
        export_bundle(tiny_models["fill-mask"].checkpoint, tmp_path / "b2", embedding_calibration=lonely)
    for number, (ranges, problem) in enumerate(
        (
            ([[0.0, 1.0]], "must be two lists"),
            ([[0.0, 1.0], [1.0]], "must be two lists"),
            ([[0.0, "x"], [1.0, 2.0]], "must hold numbers only"),
            ([[0.0, 3.0], [1.0, 2.0]], "min is above its max"),
        )
    ):
        with pytest.raises(BundleError, match=problem):
            read_bundle(variant(model[1], tmp_path / f"bad{number}", embedding_ranges=ranges))
