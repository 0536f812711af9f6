"""The core runs without FastAPI, and every way into the models passes the same limits off the event loop."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time

import httpx
import pytest

from service.settings import Settings
from tests.service.apptools import free_port, ready_app_client, real_server
from tests.service.tiny_models import TinyModel

CORE_SCRIPT = """
import asyncio, json, sys
from service.core import ServiceCore
from service.core import InferenceRequest
from service.settings import Settings
from service.tasks.text_classification import ClassificationParams

async def main():
    core = ServiceCore(Settings(models=[f"sentiment={sys.argv[1]}"], intra_op_threads=1))
    core.load()
    await core.start()
    while not core.ready:
        await asyncio.sleep(0.01)
    request = InferenceRequest("text-classification", ["a great film", "dull"], ClassificationParams(top_k=None))
    result = await core.infer(request)
    await core.stop()
    loaded = sorted({name.split(".")[0] for name in sys.modules} & {"fastapi", "starlette", "uvicorn"})
    print(json.dumps({"model": result.model, "results": result.results, "web": loaded, "ready": core.ready}))

asyncio.run(main())
"""


def test_the_core_serves_a_model_with_no_web_framework_loaded(text_classification_model: TinyModel) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CORE_SCRIPT, str(text_classification_model.bundle)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["web"] == [] and answer["model"] == "sentiment" and answer["ready"] is False
    settings = Settings(models=[f"sentiment={text_classification_model.bundle}"], intra_op_threads=1)
    with ready_app_client(settings) as client:
        served = client.post("/v1/text-classification", json={"inputs": ["a great film", "dull"], "top_k": None})
    assert [[round(item["score"], 6) for item in row] for row in answer["results"]] == [
        [round(item["score"], 6) for item in row] for row in served.json()["results"]
    ]
    assert [[item["label"] for item in row] for row in answer["results"]] == [
        [item["label"] for item in row] for row in served.json()["results"]
    ]


def test_tokenize_and_decode_pass_the_token_cap(text_classification_model: TinyModel) -> None:
    settings = Settings(models=[f"m={text_classification_model.bundle}"], intra_op_threads=1, max_request_tokens=64)
    with ready_app_client(settings) as client:
        small = client.post("/tokenize", json={"inputs": "the film was great"})
        assert small.status_code == 200 and [token["text"] for token in small.json()[0][1:-1]] == [
            "the", "film", "was", "great"
        ]  # fmt: skip
        big = client.post("/tokenize", json={"inputs": "the film " * 100})
        assert big.status_code == 413 and "max_request_tokens" in big.json()["error"]["message"]
        assert client.post("/decode", json={"ids": list(range(5, 69))}).status_code == 200
        refused = client.post("/decode", json={"ids": list(range(5, 70))})
        assert refused.status_code == 413 and "65 token ids" in refused.json()["error"]["message"]


def test_a_megabyte_tokenize_is_refused_and_a_calm_client_does_not_wait(text_classification_model: TinyModel) -> None:
    """Before: a 1 MB /tokenize ran on the event loop, 200 after ~1.8 s with a 14 MB body, every other request
    waiting behind it. Now: 413 after at most the token cap's worth of tokenizing, on a prepare thread."""
    port = free_port()
    settings = Settings(models=[f"m={text_classification_model.bundle}"], intra_op_threads=1, port=port)
    text = ("the film was great and the music was good " * 24_000)[: 1_000_000]
    with real_server(settings) as url, httpx.Client(base_url=url, timeout=30) as calm:
        body = {"inputs": "a quiet request"}
        alone = [timed(lambda: calm.post("/v1/text-classification", json=body)) for _ in range(20)]
        answer: dict[str, object] = {}

        def flood() -> None:
            started = time.perf_counter()
            response = httpx.post(f"{url}/tokenize", json={"inputs": text}, timeout=30)
            answer.update(status=response.status_code, seconds=time.perf_counter() - started)

        thread = threading.Thread(target=flood)
        thread.start()
        beside = []
        while thread.is_alive():
            beside.append(timed(lambda: calm.post("/v1/text-classification", json=body)))
        thread.join()
    assert answer["status"] == 413 and isinstance(answer["seconds"], float) and answer["seconds"] < 1.5
    assert max(beside, default=0.0) < max(1.0, 10 * statistics.median(alone)), (beside, alone)  # before: ~1.8 s


def timed(call: object) -> float:
    started = time.perf_counter()
    response = call()  # type: ignore[operator]
    assert response.status_code == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("route", ["/tokenize", "/decode"])
def test_tei_helpers_of_a_model_not_loaded_are_404(route: str, text_classification_model: TinyModel) -> None:
    settings = Settings(models=[f"m={text_classification_model.bundle}"], intra_op_threads=1)
    body = {"inputs": "x", "model": "other"} if route == "/tokenize" else {"ids": [5], "model": "other"}
    with ready_app_client(settings) as client:
        assert client.post(route, json=body).status_code == 404
