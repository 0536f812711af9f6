"""The Open Inference Protocol over gRPC, driven by Triton's own client (``tritonclient.grpc``), against REST v2.

One real server (uvicorn in a thread, ``grpc_port`` set) serves one tiny model per task. Every task's gRPC answer
equals the REST v2 answer (``tritonclient.http``) on the same inputs and parameters, output by output; each bad input
gets its status code and a message naming the problem, and the other calls in flight lose nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

from service.settings import Settings
from service.tasks import LAYOUTS
from tests.service.apptools import free_port, gate_engine, real_server, serving, wait_for
from tests.service.test_v2_protocol import PAIRS, TEXTS, bundles  # noqa: F401  (bundles: a module fixture)
from tests.service.tiny_models import TinyModel

grpcclient = pytest.importorskip("tritonclient.grpc")
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

KEY = "grpc-test-key"
Case = tuple[dict[str, list[str]], dict[str, Any]]
CASES: dict[str, list[Case]] = {
    "text-classification": [({"text": TEXTS}, {"top_k": 2}), ({"text": TEXTS, "text_pair": PAIRS}, {})],
    "token-classification": [({"text": TEXTS, "ignore_labels": ["O"]}, {"aggregation_strategy": "none"})],
    "question-answering": [({"question": ["where does john live?"] * 2, "context": TEXTS[:2]}, {"top_k": 2})],
    "fill-mask": [({"text": ["the [MASK] was wonderful.", "john [MASK] in [MASK]."]}, {"top_k": 3})],
    "feature-extraction": [({"text": TEXTS}, {"normalize": False})],
    "rerank": [({"query": ["where does john smith live?"], "documents": TEXTS + PAIRS}, {"top_n": 2})],
    "zero-shot-classification": [({"text": TEXTS}, {"candidate_labels": "film, city", "multi_label": True})],
}


@pytest.fixture(scope="module")
def clients(bundles: dict[str, Path]) -> Iterator[tuple[Any, Any]]:  # noqa: F811
    """(tritonclient.http, tritonclient.grpc) clients of one server, both protocols on."""
    grpc_port = free_port()
    settings = Settings(
        models=[f"{name}={path}" for name, path in bundles.items()],
        port=free_port(),
        grpc_port=grpc_port,
        intra_op_threads=1,
        max_inputs_per_request=8,
        max_body_bytes=64 * 1024,
        timeout_s=20,
    )  # type: ignore[call-arg]
    with real_server(settings) as url:
        rest = httpclient.InferenceServerClient(url=url.removeprefix("http://"))
        over_grpc = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port}")
        yield rest, over_grpc
        rest.close()
        over_grpc.close()


def inputs_of(module: Any, tensors: dict[str, list[str]]) -> list[Any]:
    made = []
    for name, values in tensors.items():
        tensor = module.InferInput(name, [len(values)], "BYTES")
        tensor.set_data_from_numpy(np.array(values, dtype=np.object_))
        made.append(tensor)
    return made


def test_every_case_covers_every_task_with_a_layout() -> None:
    assert set(CASES) == set(LAYOUTS)


@pytest.mark.parametrize("task", sorted(CASES))
def test_every_task_answers_over_grpc_as_over_rest(clients: tuple[Any, Any], task: str) -> None:
    rest, over_grpc = clients
    for tensors, parameters in CASES[task]:
        expected = rest.infer(task, inputs_of(httpclient, tensors), parameters=parameters)
        result = over_grpc.infer(task, inputs_of(grpcclient, tensors), parameters=parameters)
        response = result.get_response(as_json=True)
        assert response["model_name"] == task and response["model_version"] == "1"
        names = [output["name"] for output in response["outputs"]]
        assert names == list(LAYOUTS[task].output_names)
        for name in names:
            got, want = result.as_numpy(name), expected.as_numpy(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            np.testing.assert_array_equal(got, want)


def tensors_metadata(message: Any) -> dict[str, Any]:
    """A ModelMetadataResponse as REST's JSON (protobuf's own JSON mapping writes int64 shapes as strings)."""
    return {
        "name": message.name,
        "versions": list(message.versions),
        "platform": message.platform,
        **{
            side: [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in getattr(message, side)]
            for side in ("inputs", "outputs")
        },
    }


def test_health_metadata_and_readiness_equal_rest(clients: tuple[Any, Any]) -> None:
    rest, over_grpc = clients
    assert over_grpc.is_server_live() and over_grpc.is_server_ready()
    metadata = over_grpc.get_server_metadata(as_json=True)
    assert metadata == {k: v for k, v in rest.get_server_metadata().items() if k in metadata}
    assert set(metadata) == {"name", "version", "extensions"}
    for task in LAYOUTS:
        assert over_grpc.is_model_ready(task) and over_grpc.is_model_ready(task, model_version="1")
        assert tensors_metadata(over_grpc.get_model_metadata(task)) == rest.get_model_metadata(task)
    assert not over_grpc.is_model_ready("text-classification", model_version="2")
    assert not over_grpc.is_model_ready("nope") and not rest.is_model_ready("nope")
    index = over_grpc.get_model_repository_index(as_json=True)["models"]
    assert [(model["name"], model["state"]) for model in index] == [(name, "READY") for name in sorted(LAYOUTS)]


def status_of(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as excinfo:
        call()
    return excinfo.value


@pytest.mark.parametrize(
    ("what", "model", "tensors", "status", "words"),
    [
        ("unknown model", "nope", {"text": ["a"]}, "StatusCode.NOT_FOUND", ["nope"]),
        ("missing tensor", "question-answering", {"question": ["where?"]}, "StatusCode.INVALID_ARGUMENT", ["context"]),
        ("unknown tensor", "text-classification", {"txt": ["a"]}, "StatusCode.INVALID_ARGUMENT", ["txt", "text"]),
        (
            "ragged batch",
            "text-classification",
            {"text": TEXTS, "text_pair": PAIRS[:2]},
            "StatusCode.INVALID_ARGUMENT",
            ["text_pair"],
        ),
        (
            "too many inputs",
            "text-classification",
            {"text": ["a"] * 9},
            "StatusCode.INVALID_ARGUMENT",
            ["9 inputs", "max_inputs_per_request"],
        ),
    ],
)
def test_bad_input_gets_its_status_and_a_clear_message(
    clients: tuple[Any, Any], what: str, model: str, tensors: dict[str, list[str]], status: str, words: list[str]
) -> None:
    error = status_of(lambda: clients[1].infer(model, inputs_of(grpcclient, tensors)))
    assert error.status() == status, (what, error)
    assert all(word in (error.message() or "") for word in words), (what, error.message())


def test_wrong_datatype_shape_parameter_and_oversized_message(clients: tuple[Any, Any]) -> None:
    over_grpc = clients[1]
    numbers = grpcclient.InferInput("text", [2], "INT64")
    numbers.set_data_from_numpy(np.array([1, 2], dtype=np.int64))
    error = status_of(lambda: over_grpc.infer("text-classification", [numbers]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "BYTES" in error.message()
    wrong_shape = grpcclient.InferInput("text", [2], "BYTES")
    wrong_shape.set_data_from_numpy(np.array(TEXTS[:2], dtype=np.object_))
    wrong_shape.set_shape([3])
    error = status_of(lambda: over_grpc.infer("text-classification", [wrong_shape]))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "[3] holds 3 elements, its data 2" in error.message()
    text = inputs_of(grpcclient, {"text": TEXTS})
    error = status_of(lambda: over_grpc.infer("text-classification", text, parameters={"top_n": 2}))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "top_n" in error.message()
    error = status_of(lambda: over_grpc.infer("text-classification", text, parameters={"top_k": 0}))
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "top_k" in error.message()
    huge = inputs_of(grpcclient, {"text": ["word " * 20_000]})  # 100 KB: over max_body_bytes (64 KB)
    error = status_of(lambda: over_grpc.infer("text-classification", huge))
    assert error.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert over_grpc.infer("text-classification", text).as_numpy("label").shape[0] == len(TEXTS)  # still serving


def test_a_cancelled_or_expired_call_loses_nothing_for_the_calls_beside_it(clients: tuple[Any, Any]) -> None:
    rest, over_grpc = clients
    text = inputs_of(grpcclient, {"text": TEXTS})
    expected = rest.infer("text-classification", inputs_of(httpclient, {"text": TEXTS})).as_numpy("score")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        calm = [pool.submit(over_grpc.infer, "text-classification", text) for _ in range(16)]
        expired = [pool.submit(over_grpc.infer, "text-classification", text, client_timeout=1e-4) for _ in range(8)]
        for future in calm:
            np.testing.assert_array_equal(future.result().as_numpy("score"), expected)
        for future in expired:
            with pytest.raises(InferenceServerException) as excinfo:
                future.result()
            assert excinfo.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    cancelled = over_grpc.async_infer("text-classification", text, lambda result, error: None)
    cancelled.cancel()
    np.testing.assert_array_equal(over_grpc.infer("text-classification", text).as_numpy("score"), expected)


def test_api_keys_guard_every_call_but_the_health_probes(text_classification_model: TinyModel) -> None:
    grpc_port = free_port()
    settings = Settings(
        models=[f"sst={text_classification_model.bundle}"],
        port=free_port(),
        grpc_port=grpc_port,
        api_keys=[KEY],
        intra_op_threads=1,
    )  # type: ignore[call-arg]
    with real_server(settings) as url:
        client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port}")
        assert client.is_server_live() and client.is_server_ready()
        text = inputs_of(grpcclient, {"text": TEXTS})
        for headers in (None, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
            error = status_of(lambda headers=headers: client.infer("sst", text, headers=headers))
            assert error.status() == "StatusCode.UNAUTHENTICATED" and "API key" in error.message()
        error = status_of(lambda: client.get_model_metadata("sst"))
        assert error.status() == "StatusCode.UNAUTHENTICATED"
        answer = client.infer("sst", text, headers={"authorization": f"Bearer {KEY}"})
        assert answer.as_numpy("label").shape == (len(TEXTS), 1)
        client.close()
        metrics = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {KEY}"}).text
        infer = 'route="/inference.GRPCInferenceService/ModelInfer"'
        assert f'bertserve_requests_total{{{infer},status="UNAUTHENTICATED"}} 3.0' in metrics
        assert f'bertserve_requests_total{{{infer},status="OK"}} 1.0' in metrics


def test_over_the_in_flight_cap_a_call_gets_resource_exhausted_with_its_retry_delay(
    text_classification_model: TinyModel,
) -> None:
    """HTTP and gRPC share the in-flight permits: two HTTP requests held in the model, the gRPC call is refused at
    once, its delay in trailing metadata; once they are answered the permits are back."""
    from service.grpc.protocol import MESSAGES, METHODS, SERVICE

    grpc_port = free_port()
    settings = Settings(
        models=[f"sst={text_classification_model.bundle}"],
        grpc_port=grpc_port,
        intra_op_threads=1,
        model_workers=1,
        max_batch_size=1,
        max_concurrent_requests=2,
    )  # type: ignore[call-arg]
    request = MESSAGES["ModelInferRequest"](model_name="sst")
    request.inputs.add(name="text", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"a fine film")

    async def main() -> None:
        async with serving(settings) as (app, client):
            engine = app.state.registry.engines["sst"]
            runner, gate = gate_engine(engine)
            route = "/v1/text-classification"
            held = [asyncio.ensure_future(client.post(route, json={"inputs": text})) for text in ("one", "two")]
            await wait_for(runner.entered.is_set)
            await wait_for(lambda: engine.batcher.queue_depth == 1)
            async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                infer = channel.unary_unary(
                    f"/{SERVICE}/ModelInfer",
                    request_serializer=METHODS["ModelInfer"][0].SerializeToString,
                    response_deserializer=METHODS["ModelInfer"][1].FromString,
                )
                with pytest.raises(grpc.aio.AioRpcError) as excinfo:
                    await infer(request, timeout=5)
                refused = excinfo.value
                assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "2 requests in flight" in (refused.details() or "")
                trailing = dict(refused.trailing_metadata() or ())
                assert int(trailing["retry-after"]) >= 1
                assert int(trailing["grpc-retry-pushback-ms"]) == 1000 * int(trailing["retry-after"])
                gate.set()
                assert [response.status_code for response in await asyncio.gather(*held)] == [200, 200]
                answer = await infer(request, timeout=5)
                assert [output.name for output in answer.outputs] == ["label", "score"]
                assert len(answer.raw_output_contents) == 2

    asyncio.run(main())


def test_models_load_and_unload_over_grpc(text_classification_model: TinyModel, tmp_path: Path) -> None:
    shutil.copytree(text_classification_model.bundle, tmp_path / "first")
    grpc_port = free_port()
    settings = Settings(models_dir=tmp_path, port=free_port(), grpc_port=grpc_port, intra_op_threads=1, tune=False)  # type: ignore[call-arg]
    with real_server(settings):
        client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_port}")
        text = inputs_of(grpcclient, {"text": TEXTS})
        first = client.infer("first", text).as_numpy("score")
        shutil.copytree(text_classification_model.bundle, tmp_path / "second")
        assert not client.is_model_ready("second")
        client.load_model("second")
        assert client.is_model_ready("second")
        np.testing.assert_array_equal(client.infer("second", text).as_numpy("score"), first)
        error = status_of(lambda: client.load_model("second", config='{"backend": "onnx"}'))
        assert error.status() == "StatusCode.INVALID_ARGUMENT" and "no parameters" in error.message()
        client.unload_model("second")
        assert status_of(lambda: client.infer("second", text)).status() == "StatusCode.NOT_FOUND"
        states = {model["name"]: model["state"] for model in client.get_model_repository_index(as_json=True)["models"]}
        assert states == {"first": "READY", "second": "UNAVAILABLE"}
        client.close()


def test_the_grpc_transport_imports_no_http_framework() -> None:
    frameworks = "{'fastapi', 'starlette', 'uvicorn'}"
    code = f"import sys, service.grpc.server; print(sorted({{m.split('.')[0] for m in sys.modules}} & {frameworks}))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"
