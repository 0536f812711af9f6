"""Models loaded and unloaded without a restart (the Open Inference Protocol's model repository extension), driven
by ``tritonclient.http`` against a real server whose models folder changes while it runs."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.settings import Settings
from tests.service.apptools import free_port, real_server
from tests.service.tiny_models import TinyModel

httpclient = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

BODY = {"inputs": ["a fine film", "a dull one"]}


@pytest.fixture(scope="module")
def models_dir(tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("repository")
    shutil.copytree(tiny_models["text-classification"].bundle, folder / "first")
    return folder


@pytest.fixture(scope="module")
def served(models_dir: Path) -> Iterator[tuple[str, Any]]:
    """The server's URL and a tritonclient for it."""
    settings = Settings(models_dir=models_dir, port=free_port(), intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    with real_server(settings) as url:
        client = httpclient.InferenceServerClient(url=url.removeprefix("http://"))
        yield url, client
        client.close()


def classify(url: str, model: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/text-classification", json={"model": model, **BODY}, timeout=30)


def states(triton: Any) -> dict[str, tuple[str, str]]:
    return {entry["name"]: (entry["state"], entry["reason"]) for entry in triton.get_model_repository_index()}


def test_a_bundle_added_while_serving_is_loaded_served_and_unloaded(
    served: tuple[str, Any], models_dir: Path, tiny_models: dict[str, TinyModel]
) -> None:
    server_url, triton = served
    first = classify(server_url, "first")
    assert first.status_code == 200
    shutil.copytree(tiny_models["text-classification"].bundle, models_dir / "second")
    assert states(triton) == {"first": ("READY", ""), "second": ("UNAVAILABLE", "not loaded")}
    assert classify(server_url, "second").status_code == 404

    triton.load_model("second")
    assert triton.is_model_ready("second")
    answer = classify(server_url, "second")
    assert answer.status_code == 200
    assert answer.json()["results"] == first.json()["results"]  # the same bundle, the same answers
    assert {model["id"] for model in httpx.get(f"{server_url}/v1/models").json()["data"]} == {"first", "second"}
    ready = httpx.post(f"{server_url}/v2/repository/index", json={"ready": True}).json()
    assert [(entry["name"], entry["version"]) for entry in ready] == [("first", "1"), ("second", "1")]

    triton.unload_model("second")
    assert classify(server_url, "second").status_code == 404
    assert states(triton)["second"] == ("UNAVAILABLE", "not loaded")
    assert classify(server_url, "first").status_code == 200
    assert httpx.get(f"{server_url}/health/ready").status_code == 200


def test_loading_again_keeps_serving_and_a_broken_bundle_leaves_the_models_as_they_were(
    served: tuple[str, Any], models_dir: Path
) -> None:
    server_url, triton = served
    triton.load_model("first")  # a reload: the new engine replaces the old once warm
    assert classify(server_url, "first").status_code == 200

    broken = models_dir / "broken"
    broken.mkdir()
    (broken / "bundle.json").write_text("{}")
    with pytest.raises(InferenceServerException, match="model 'broken' was not loaded"):
        triton.load_model("broken")
    state, reason = states(triton)["broken"]
    assert state == "UNAVAILABLE" and reason and reason != "not loaded"
    assert states(triton)["first"] == ("READY", "")
    assert classify(server_url, "first").status_code == 200


def test_unknown_models_and_parameters_are_refused_in_the_protocols_error_shape(served: tuple[str, Any]) -> None:
    server_url, triton = served
    with pytest.raises(InferenceServerException, match="no model 'nope'"):
        triton.load_model("nope")
    with pytest.raises(InferenceServerException, match="no model named 'nope' is loaded"):
        triton.unload_model("nope")
    with pytest.raises(InferenceServerException, match="takes no parameters"):
        triton.load_model("first", config='{"max_batch_size": 4}')
    refused = httpx.post(f"{server_url}/v2/repository/index", content=b'{"ready": "maybe"}')
    assert refused.status_code == 422 and set(refused.json()) == {"error"}
