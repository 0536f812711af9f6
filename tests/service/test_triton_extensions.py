"""Triton's statistics and model configuration extensions through Triton's own clients (``tritonclient.http`` and
``.grpc``: ``get_inference_statistics``, ``get_model_config``) against one real server with both protocols on.

Statistics: the counts follow the requests sent, the batches' sizes add up to the rows run, a failed request counts
as a failure only, the warm-up counts for nothing, and both protocols report the same figures. Configuration: the
model metadata's tensors in the configuration's terms, the workers as its instance group, the same over gRPC (decoded
by tritonclient's own ``model_config.proto`` messages)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
from google.protobuf import json_format

from tests.service.apptools import free_port, real_server_for
from tests.service.tiny_models import TinyModel

grpcclient = pytest.importorskip("tritonclient.grpc")
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.grpc import model_config_pb2, service_pb2  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = ["the movie was wonderful.", "john smith lives in paris.", "the team won the game in extra time", "paris"]


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, TinyModel]) -> Iterator[tuple[str, Any, Any]]:
    """(URL, tritonclient.http client, tritonclient.grpc client) of one server of two models."""
    grpc_port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle, "rank": tiny_models["rerank"].bundle}
    with real_server_for(bundles, grpc_port=grpc_port, tune=False) as url:
        yield (
            url,
            httpclient.InferenceServerClient(url.removeprefix("http://")),
            grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}"),
        )


def same_over_grpc(client: Any, stat: dict[str, Any]) -> bool:
    """Whether the gRPC answer for ``stat``'s model is ``stat`` (the REST answer), as Triton's own message."""
    over_grpc = client.get_inference_statistics(stat["name"]).model_stats
    return len(over_grpc) == 1 and over_grpc[0] == json_format.ParseDict(stat, service_pb2.ModelStatistics())


def test_counts_follow_the_requests_and_both_protocols_agree(served: tuple[str, Any, Any]) -> None:
    url, http, grpc = served
    start = http.get_inference_statistics("sst")["model_stats"][0]
    assert (start["name"], start["version"], start["last_inference"]) == ("sst", "1", 0)  # the warm-up is no traffic
    assert (start["inference_count"], start["execution_count"], start["batch_stats"]) == (0, 0, [])
    assert start["inference_stats"]["success"] == {"count": 0, "ns": 0}

    sizes = [1, 2, 3, 1, 4]  # one request at a time: each batch runs one request's rows
    before_ms = int(time.time() * 1000)
    for size in sizes:
        answer = httpx.post(f"{url}/v1/text-classification", json={"model": "sst", "inputs": TEXTS[:size]})
        assert answer.status_code == 200, answer.text
    after_ms = int(time.time() * 1000)

    stat = http.get_inference_statistics("sst")["model_stats"][0]
    inference = stat["inference_stats"]
    assert stat["inference_count"] == sum(sizes)
    assert before_ms <= stat["last_inference"] <= after_ms
    for stage in ("success", "queue", "compute_infer"):
        assert inference[stage]["count"] == len(sizes), stage
    assert inference["fail"] == {"count": 0, "ns": 0}
    assert inference["compute_input"] == inference["compute_output"] == {"count": len(sizes), "ns": 0}  # inside infer
    assert inference["success"]["ns"] > inference["compute_infer"]["ns"] > 0
    batches = stat["batch_stats"]
    assert stat["execution_count"] == sum(batch["compute_infer"]["count"] for batch in batches) >= len(sizes)
    assert sum(batch["batch_size"] * batch["compute_infer"]["count"] for batch in batches) == sum(sizes)
    assert [batch["batch_size"] for batch in batches] == sorted({batch["batch_size"] for batch in batches})
    batch_ns = sum(batch["compute_infer"]["ns"] for batch in batches)
    assert abs(inference["compute_infer"]["ns"] - batch_ns) <= 2 * stat["execution_count"]  # int rounding only
    assert same_over_grpc(grpc, stat)
    assert http.get_inference_statistics("rank")["model_stats"][0]["inference_count"] == 0


def test_a_failed_request_counts_as_a_failure_only(served: tuple[str, Any, Any]) -> None:
    url, http, grpc = served
    before = http.get_inference_statistics("sst")["model_stats"][0]
    too_long = " ".join(["paris"] * 2000)
    answer = httpx.post(f"{url}/v1/text-classification", json={"model": "sst", "inputs": too_long})
    assert answer.status_code == 400, answer.text
    after = http.get_inference_statistics("sst")["model_stats"][0]
    assert after["inference_stats"]["fail"]["count"] == before["inference_stats"]["fail"]["count"] + 1
    assert after["inference_stats"]["fail"]["ns"] > before["inference_stats"]["fail"]["ns"]
    unchanged = ("inference_count", "execution_count", "batch_stats")
    assert {key: after[key] for key in unchanged} == {key: before[key] for key in unchanged}
    assert after["inference_stats"]["success"] == before["inference_stats"]["success"]
    assert same_over_grpc(grpc, after)


def test_every_model_and_unknown_names(served: tuple[str, Any, Any]) -> None:
    _, http, grpc = served
    assert [stat["name"] for stat in http.get_inference_statistics()["model_stats"]] == ["rank", "sst"]
    assert [stat["name"] for stat in grpc.get_inference_statistics(as_json=True)["model_stats"]] == ["rank", "sst"]
    assert http.get_inference_statistics("sst", model_version="1")["model_stats"][0]["name"] == "sst"
    for client in (http, grpc):
        with pytest.raises(InferenceServerException, match="nope"):
            client.get_inference_statistics("nope")
        with pytest.raises(InferenceServerException, match="version"):
            client.get_inference_statistics("sst", model_version="2")
    assert "statistics" in http.get_server_metadata()["extensions"]
    assert "statistics" in grpc.get_server_metadata(as_json=True)["extensions"]


def test_model_config_is_the_metadata_in_configuration_terms(served: tuple[str, Any, Any]) -> None:
    url, http, grpc = served
    for name, task in (("sst", "text-classification"), ("rank", "rerank")):
        config, metadata = http.get_model_config(name), http.get_model_metadata(name)
        assert (config["name"], config["platform"], config["backend"]) == (name, "onnxruntime_onnx", "onnxruntime")
        assert config["max_batch_size"] == 0 and config["parameters"] == {"task": {"string_value": task}}

        def typed(tensor: dict[str, Any]) -> tuple[str, str, list[int]]:
            kind = "TYPE_STRING" if tensor["datatype"] == "BYTES" else f"TYPE_{tensor['datatype']}"
            return tensor["name"], kind, tensor["shape"]

        assert [(item["name"], item["data_type"], item["dims"]) for item in config["input"]] == [
            typed(tensor) for tensor in metadata["inputs"]
        ]
        assert [(item["name"], item["data_type"], item["dims"]) for item in config["output"]] == [
            typed(tensor) for tensor in metadata["outputs"]
        ]
        workers = httpx.get(f"{url}/v1/models/{name}").json()["batching"]["workers"]
        assert config["instance_group"] == [{"name": name, "kind": "KIND_CPU", "count": workers, "gpus": []}]
        assert grpc.get_model_config(name).config == json_format.ParseDict(config, model_config_pb2.ModelConfig())
    optional = {item["name"]: item["optional"] for item in http.get_model_config("sst")["input"]}
    assert optional == {"text": False, "text_pair": True}
    assert http.get_model_config("sst", model_version="1")["name"] == "sst"
    for client in (http, grpc):
        with pytest.raises(InferenceServerException, match="nope"):
            client.get_model_config("nope")


def test_triton_reserved_parameters_are_left_out(served: tuple[str, Any, Any]) -> None:
    """perf_analyzer sends ``triton_enable_empty_final_response``; Triton's ``triton_*`` names are no task option."""
    _, http, grpc = served
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        text = module.InferInput("text", [2], "BYTES")
        text.set_data_from_numpy(np.array(TEXTS[:2], dtype=object))
        plain = client.infer("sst", [text], parameters={"top_k": 2})
        reserved = client.infer("sst", [text], parameters={"top_k": 2, "triton_enable_empty_final_response": True})
        for output in ("label", "score"):
            assert np.array_equal(reserved.as_numpy(output), plain.as_numpy(output))
        with pytest.raises(InferenceServerException, match="unknown parameter 'enable_empty_final_response'"):
            client.infer("sst", [text], parameters={"enable_empty_final_response": True})


def test_timeout_and_priority_are_request_parameters(served: tuple[str, Any, Any]) -> None:
    """tritonclient's ``infer(timeout=...)`` (microseconds) is the request's deadline; ``priority`` is accepted."""
    _, http, grpc = served
    for module, client, late_status in ((httpclient, http, "504"), (grpcclient, grpc, "StatusCode.DEADLINE_EXCEEDED")):
        text = module.InferInput("text", [2], "BYTES")
        text.set_data_from_numpy(np.array(TEXTS[:2], dtype=object))
        plain = client.infer("sst", [text]).as_numpy("score")
        assert np.array_equal(client.infer("sst", [text], timeout=10_000_000, priority=3).as_numpy("score"), plain)
        assert np.array_equal(client.infer("sst", [text], timeout=0).as_numpy("score"), plain)  # 0: no deadline
        with pytest.raises(InferenceServerException, match="timed out") as late:
            client.infer("sst", [text], timeout=1)
        assert late.value.status() == late_status
        with pytest.raises(InferenceServerException, match="'timeout' must be a whole number"):
            client.infer("sst", [text], parameters={"timeout": "soon"})


def test_a_model_on_a_gpu_is_configured_as_a_gpu_instance_group() -> None:
    """The card's side of the configuration, without a card: only the engine's name, task, device and workers count."""
    from service.device import Device
    from service.oip.models import config_of

    on_card = SimpleNamespace(name="sst", task="text-classification", device=Device("cuda", 1), workers=[0, 1])
    assert config_of(on_card)["instance_group"] == [{"name": "sst", "kind": "KIND_GPU", "count": 2, "gpus": [1]}]  # type: ignore[arg-type]
