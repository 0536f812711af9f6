"""The fast path answers exactly what the FastAPI routes answer: same status, headers that matter, bytes.

One app with the fast path, one without (``fast_path=False``), the same tiny models; every v1 task route gets
valid requests and the errors a client can cause (bad JSON, wrong media type, schema errors, unknown model,
handler refusals), and both apps' answers are compared byte for byte. The fast path must also be the one
answering (a request it takes never reaches FastAPI's route function), and the metrics label its requests
by route template.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api import tasks as task_routes
from service.app import create_app
from service.settings import Settings
from tests.service.tiny_models import TinyModel

JSON = {"content-type": "application/json"}
CASES: list[tuple[str, Any, dict[str, str]]] = [
    ("/v1/text-classification", {"inputs": "a fine film"}, JSON),
    ("/v1/text-classification", {"inputs": ["good", {"text": "a", "text_pair": "b"}], "top_k": None}, JSON),
    ("/v1/text-classification", {"inputs": "x", "top_k": 0}, JSON),
    ("/v1/text-classification", {"inputs": "x", "model": "nope"}, JSON),
    ("/v1/text-classification", {"inputs": "x", "function_to_apply": "sigmoid"}, JSON),
    ("/v1/text-classification", b'{"inputs": "x",', JSON),
    ("/v1/text-classification", b'{"inputs": "x"}', {"content-type": "text/plain"}),
    ("/v1/text-classification", b'{"inputs": "x"}', {}),
    ("/v1/text-classification", {"inputs": "   "}, JSON),
    ("/v1/text-classification", {"inputs": "word " * 400}, JSON),
    ("/v1/question-answering", {"inputs": {"question": "Who?", "context": "Anna lives in Paris."}, "top_k": 2}, JSON),
    ("/v1/question-answering", {"inputs": {"question": "Who?"}}, JSON),
    ("/v1/token-classification", {"inputs": "John Smith lives in Paris.", "aggregation_strategy": "simple"}, JSON),
    ("/v1/fill-mask", {"inputs": "Paris is the [MASK] of France.", "top_k": 3}, JSON),
    ("/v1/fill-mask", {"inputs": "no mask here"}, JSON),
    ("/v1/zero-shot-classification", {"inputs": "a cheap phone", "candidate_labels": ["price", "sport"]}, JSON),
    ("/v1/zero-shot-classification", {"inputs": "a cheap phone", "candidate_labels": []}, JSON),
    ("/v1/text-classification", {"inputs": "x"}, {"content-type": "application/json; charset=utf-8"}),
]


def started(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 10
        while client.get("/health/ready").status_code != 200:
            assert time.monotonic() < deadline, "service never became ready"
            time.sleep(0.01)
        yield client


@pytest.fixture(scope="module")
def settings(tiny_models: dict[str, TinyModel]) -> Settings:
    models = [f"{task}={model.bundle}" for task, model in tiny_models.items() if task != "feature-extraction"]
    return Settings(models=models, intra_op_threads=1, max_wait_ms=1.0, max_inputs_per_request=4)


@pytest.fixture(scope="module")
def fast(settings: Settings) -> Iterator[TestClient]:
    yield from started(settings)


@pytest.fixture(scope="module")
def routed(settings: Settings) -> Iterator[TestClient]:
    yield from started(settings.model_copy(update={"fast_path": False}))


def send(client: TestClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    if isinstance(body, bytes):
        return client.post(path, content=body, headers=headers)
    return client.post(path, json=body, headers=headers)


@pytest.mark.parametrize(("path", "body", "headers"), CASES, ids=[f"{c[0][4:]}-{i}" for i, c in enumerate(CASES)])
def test_fast_path_answers_what_the_route_answers(
    fast: TestClient, routed: TestClient, path: str, body: Any, headers: dict[str, str]
) -> None:
    ours, theirs = send(fast, path, body, headers), send(routed, path, body, headers)
    assert ours.status_code == theirs.status_code
    assert ours.headers["content-type"] == theirs.headers["content-type"]
    assert ours.headers.get("retry-after") == theirs.headers.get("retry-after")
    assert ours.content == theirs.content


def test_valid_requests_skip_the_fastapi_route(
    fast: TestClient, routed: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    original = task_routes.run_task

    async def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("route")
        return await original(*args, **kwargs)

    monkeypatch.setattr(task_routes, "run_task", counting)
    assert fast.post("/v1/text-classification", json={"inputs": "fine"}).status_code == 200
    assert calls == []
    assert fast.post("/v1/text-classification", json={"inputs": "fine", "top_k": 0}).status_code == 422
    assert routed.post("/v1/text-classification", json={"inputs": "fine"}).status_code == 200
    assert calls == ["route"]


def test_fast_path_requests_are_labelled_by_route(fast: TestClient) -> None:
    def count() -> float:
        for line in fast.get("/metrics").text.splitlines():
            if line.startswith('bertserve_requests_total{route="/v1/fill-mask",status="200"}'):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = count()
    assert fast.post("/v1/fill-mask", json={"inputs": "a [MASK] day"}).status_code == 200
    assert count() == before + 1
