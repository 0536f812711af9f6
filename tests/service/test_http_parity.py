"""Over HTTP, every task answers what transformers' pipeline answers on the same HF checkpoint.

The service runs the exported ONNX bundle; the oracle runs the checkpoint in torch. Scores agree
within 1e-4; labels, spans, offsets, entity groups and tokens agree exactly, except that items whose
scores tie within 1e-6 may come in either order (ONNX Runtime and torch round differently).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.service.tiny_models import MAX_LENGTH, TinyModel

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from fastapi.testclient import TestClient  # noqa: E402

from service.app import create_app  # noqa: E402
from service.settings import Settings  # noqa: E402

TOLERANCE = 1e-4
TIE_TOLERANCE = 1e-6  # ORT and torch differ by ~1e-7; the tiny models' scores are close to uniform
SENTENCES = [
    "John Smith lives in Paris and works for the United Nations in Geneva.",
    "Mary Johnson visited London, Berlin and Rome last summer with her family.",
    "Anna Maria moved from Madrid to Tokyo in January to study.",
    "The river flows through the old city towards the mountains.",
    "Google, Apple and Microsoft are large companies in America.",
]
LONG_TEXT = " ".join(SENTENCES * 4)
TEXTS = [
    "The movie was wonderful, the actors were brilliant!",
    "  a   terrible,\tboring film ...  ",
    "Café naïve résumé — 東京 🙂",
    "Unbelievably, Geneva's bankers didn't care.",
    LONG_TEXT,
]


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel]) -> Iterator[TestClient]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the oracle's tiny models: more threads only add overhead
    settings = Settings(models=[f"{task}={model.bundle}" for task, model in tiny_models.items()], max_wait_ms=1.0)  # type: ignore[call-arg]
    with TestClient(create_app(settings)) as test_client:
        deadline = time.monotonic() + 60
        while test_client.get("/health/ready").status_code != 200:
            assert time.monotonic() < deadline, test_client.get("/health/ready").json()
            time.sleep(0.05)
        yield test_client
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pipelines(tiny_models: dict[str, TinyModel]) -> dict[str, Any]:
    return {
        task: transformers.pipeline(task, model=str(model.checkpoint), tokenizer=str(model.checkpoint), device="cpu")
        for task, model in tiny_models.items()
        if task in transformers.pipelines.SUPPORTED_TASKS  # rerank has no pipeline
    }


def post(client: TestClient, task: str, body: dict[str, Any]) -> list[Any]:
    response = client.post(f"/v1/{task}", json={"model": task, **body})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def without_nulls(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if value is not None}


def assert_item(ours: dict[str, Any], theirs: dict[str, Any], path: str, tolerance: float = TOLERANCE) -> None:
    ours = without_nulls(ours)
    assert set(ours) == set(theirs), f"{path}: keys {sorted(ours)} != {sorted(theirs)}"
    for key, expected in theirs.items():
        if key == "score":
            assert abs(ours[key] - float(expected)) <= tolerance, f"{path}.score: {ours[key]} != {expected}"
        else:
            assert ours[key] == expected, f"{path}.{key}: {ours[key]!r} != {expected!r}"


def identity(item: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((key, value) for key, value in without_nulls(item).items() if key != "score"))


def assert_ranked_same(
    ours: list[dict[str, Any]], theirs: list[dict[str, Any]], path: str, tolerance: float = TOLERANCE
) -> None:
    """Same items in the same order, where items whose scores tie within the tolerance may swap
    (and, at the top-k cut, a tied item may stand in for another); ties are ``TIE_TOLERANCE`` apart."""
    assert len(ours) == len(theirs), f"{path}: {len(ours)} items != {len(theirs)}\n{ours}\n{theirs}"
    for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        if identity(mine) == identity(other):
            assert_item(mine, other, f"{path}[{index}]", tolerance)
            continue
        assert abs(mine["score"] - float(other["score"])) <= TIE_TOLERANCE, f"{path}[{index}]: {mine} != {other}"
        tied = [item for item in theirs if abs(float(item["score"]) - mine["score"]) <= TIE_TOLERANCE]
        match = [item for item in tied if identity(item) == identity(mine)]
        at_cut = abs(mine["score"] - float(theirs[-1]["score"])) <= TIE_TOLERANCE
        assert match or at_cut, f"{path}[{index}]: {mine} is not {other} nor tied with another answer"
        if match:
            assert_item(mine, match[0], f"{path}[{index}]")


def test_text_classification(client: TestClient, pipelines: dict[str, Any]) -> None:
    task = "text-classification"
    inputs: list[Any] = [
        *TEXTS,
        {"text": SENTENCES[0], "text_pair": SENTENCES[1]},
        {"text": "Short.", "text_pair": LONG_TEXT},
    ]
    for params in (
        {},
        {"top_k": None},
        {"top_k": 2, "function_to_apply": "sigmoid"},
        {"top_k": None, "function_to_apply": "none"},
    ):
        results = post(client, task, {"inputs": inputs, "truncation": True, **params})
        for index, (item, result) in enumerate(zip(inputs, results, strict=True)):
            theirs = pipelines[task](
                item,
                top_k=params.get("top_k", 1),
                truncation=True,
                **{key: value for key, value in params.items() if key == "function_to_apply"},
            )
            assert_ranked_same(result, theirs, f"{params}[{index}]")


QA_INPUTS = [
    {"question": "Where does John Smith live?", "context": SENTENCES[0]},
    {"question": "Who visited London?", "context": LONG_TEXT},
    {"question": "What flows through the city?", "context": "  The river   flows,\tthrough the old city 🙂 café…  "},
]
QA_PARAMS: list[dict[str, Any]] = [
    {},
    {"top_k": 3},
    {"top_k": 5, "handle_impossible_answer": True},
    {"top_k": 2, "max_seq_len": 48, "doc_stride": 16},
    {"top_k": 4, "max_answer_len": 4, "max_seq_len": 64, "doc_stride": 8, "handle_impossible_answer": True},
]


@pytest.mark.parametrize("params", QA_PARAMS, ids=str)
def test_question_answering(client: TestClient, pipelines: dict[str, Any], params: dict[str, Any]) -> None:
    task = "question-answering"
    results = post(client, task, {"inputs": QA_INPUTS, **params})
    for index, (item, result) in enumerate(zip(QA_INPUTS, results, strict=True)):
        theirs = pipelines[task](**item, **params)
        assert_ranked_same(result, theirs if isinstance(theirs, list) else [theirs], f"{params}[{index}]")


def test_question_answering_windows_long_contexts(tiny_models: dict[str, TinyModel]) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_models["question-answering"].checkpoint)
    assert len(tokenizer(QA_INPUTS[1]["question"], LONG_TEXT)["input_ids"]) > 2 * MAX_LENGTH


NER_TEXTS = [*TEXTS[:4], *SENTENCES[:2], LONG_TEXT]
DEFAULT_STRIDE = MAX_LENGTH // 4


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_token_classification(client: TestClient, pipelines: dict[str, Any], strategy: str) -> None:
    task = "token-classification"
    texts = NER_TEXTS if strategy != "none" else NER_TEXTS[:-1]
    for ignore_labels in (["O"], []):
        body = {"inputs": texts, "aggregation_strategy": strategy, "ignore_labels": ignore_labels}
        results = post(client, task, body)
        for index, (text, result) in enumerate(zip(texts, results, strict=True)):
            stride = {} if strategy == "none" else {"stride": DEFAULT_STRIDE}
            theirs = pipelines[task](text, aggregation_strategy=strategy, ignore_labels=ignore_labels, **stride)
            assert len(result) == len(theirs), f"{strategy}[{index}]: {result} != {theirs}"
            for position, (mine, other) in enumerate(zip(result, theirs, strict=True)):
                assert_item(mine, other, f"{strategy}[{index}][{position}]")


@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_token_classification_with_stride(client: TestClient, pipelines: dict[str, Any], strategy: str) -> None:
    task = "token-classification"
    texts = [LONG_TEXT, SENTENCES[0]]
    body = {"inputs": texts, "aggregation_strategy": strategy, "stride": 16, "ignore_labels": []}
    for index, (text, result) in enumerate(zip(texts, post(client, task, body), strict=True)):
        theirs = pipelines[task](text, aggregation_strategy=strategy, stride=16, ignore_labels=[])
        assert len(result) == len(theirs), f"{strategy}[{index}]: {result} != {theirs}"
        for position, (mine, other) in enumerate(zip(result, theirs, strict=True)):
            assert_item(mine, other, f"{strategy}[{index}][{position}]")


FILL_MASK_TEXTS = [
    "John Smith lives in [MASK] and works for the United Nations.",
    "  The movie was [MASK],   the actors were brilliant!!  ",
    "Anna moved from Madrid to 東京 in [MASK] 🙂 to study économics.",
    "[MASK] visited London, Berlin and [MASK] last summer.",
]
FILL_MASK_PARAMS: list[dict[str, Any]] = [
    {},
    {"top_k": 1},
    {"top_k": 10},
    {"targets": ["paris", "london", "rome", "the"]},
    {"top_k": 2, "targets": ["Paris", "unbelievably", "geneva", "paris"]},
]


@pytest.mark.parametrize("params", FILL_MASK_PARAMS, ids=str)
def test_fill_mask(client: TestClient, pipelines: dict[str, Any], params: dict[str, Any]) -> None:
    task = "fill-mask"
    results = post(client, task, {"inputs": FILL_MASK_TEXTS, **params})
    for index, (text, result) in enumerate(zip(FILL_MASK_TEXTS, results, strict=True)):
        theirs = pipelines[task](text, **params)
        per_mask = theirs if text.count("[MASK]") > 1 else [theirs]
        assert len(result) == len(per_mask)
        for mask, (mine, other) in enumerate(zip(result, per_mask, strict=True)):
            assert_ranked_same(mine, other, f"{params}[{index}][{mask}]")
