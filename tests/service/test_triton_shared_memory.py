"""Triton's system shared memory extension through tritonclient's own clients (REST and gRPC) and its shared memory
utilities (``tritonclient.utils.shared_memory``: real POSIX objects in /dev/shm) against a real server: inputs read
from a region and outputs written to one answer what the same request answers over the wire; regions are listed,
unregistered and refused as Triton does; the CUDA calls say no region can be had; all of it is off by default."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest

from tests.service.apptools import free_port, real_server_for
from tests.service.tiny_models import TinyModel

grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException, serialize_byte_tensor  # noqa: E402

TEXTS = ["the movie was wonderful.", "a dull and far too long film", "paris"]
PAIRS = ["it was great", "i slept", "france"]
PROTOCOLS = ["http", "grpc"]


def clients_for(url: str, grpc_port: int) -> dict[str, tuple[Any, Any]]:
    return {
        "http": (httpclient, httpclient.InferenceServerClient(url.removeprefix("http://"))),
        "grpc": (grpcclient, grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")),
    }


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, TinyModel]) -> Iterator[tuple[str, dict[str, tuple[Any, Any]]]]:
    """A server of a classifier that lets clients register shared memory, its URL and a client per protocol."""
    grpc_port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, grpc_port=grpc_port, tune=False, allow_client_shm=True) as url:
        yield url, clients_for(url, grpc_port)


class Objects:
    """Shared memory objects created for one test (as a client creates them), destroyed after it."""

    def __init__(self) -> None:
        self.handles: list[Any] = []

    def create(self, label: str, byte_size: int) -> tuple[Any, str]:
        key = f"/bertserve_test_{os.getpid()}_{label}"
        handle = shm.create_shared_memory_region(label, key, byte_size)
        self.handles.append(handle)
        return handle, key

    def destroy(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def objects(served: tuple[str, dict[str, tuple[Any, Any]]]) -> Iterator[Objects]:
    made = Objects()
    yield made
    for _, client in served[1].values():
        client.unregister_system_shared_memory()
    made.destroy()


def texts_tensor(module: Any, name: str, texts: list[str]) -> Any:
    tensor = module.InferInput(name, [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([text.encode() for text in texts], dtype=object))
    return tensor


def serialized(texts: list[str]) -> np.ndarray:
    """The texts as a BYTES tensor's bytes (tritonclient's serialization: what shared memory holds)."""
    return serialize_byte_tensor(np.array([text.encode() for text in texts], dtype=object))


def status_of(
    client: Any, protocol: str, name: str = "", headers: dict[str, str] | None = None
) -> dict[str, dict[str, int | str]]:
    """The regions' status by name, whatever the protocol's answer shape."""
    options = {"as_json": True} if protocol == "grpc" else {}
    answer = client.get_system_shared_memory_status(name, headers=headers, **options)
    listed = list(answer.get("regions", {}).values()) if protocol == "grpc" else answer
    return {item["name"]: {key: int(value) if key in ("offset", "byte_size") else value
                           for key, value in item.items()} for item in listed}  # fmt: skip


def refusal(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def code_of(error: InferenceServerException) -> str:
    return str(error.status())


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_inputs_from_and_outputs_to_shared_memory_answer_as_the_wire_does(
    served: tuple[str, dict[str, tuple[Any, Any]]], objects: Objects, protocol: str
) -> None:
    _, clients = served
    module, client = clients[protocol]
    wire = client.infer(
        "sst",
        [texts_tensor(module, "text", TEXTS), texts_tensor(module, "text_pair", PAIRS)],
        outputs=[module.InferRequestedOutput("label"), module.InferRequestedOutput("score")],
    )

    tensor = serialized(TEXTS)
    data = tensor.item()
    inputs, input_key = objects.create(f"in_{protocol}", 32 + len(data))
    shm.set_shared_memory_region(inputs, [tensor], offset=32)
    out, out_key = objects.create(f"out_{protocol}", 4096)
    client.register_system_shared_memory("in", input_key, len(data) + 16, offset=16)  # the data 16 bytes into it
    client.register_system_shared_memory("out", out_key, 1024, offset=512)
    assert status_of(client, protocol) == {
        "in": {"name": "in", "key": input_key, "offset": 16, "byte_size": len(data) + 16},
        "out": {"name": "out", "key": out_key, "offset": 512, "byte_size": 1024},
    }
    assert list(status_of(client, protocol, "out")) == ["out"]

    text = module.InferInput("text", [len(TEXTS)], "BYTES")
    text.set_shared_memory("in", len(data), offset=16)
    label, score = module.InferRequestedOutput("label"), module.InferRequestedOutput("score")
    label.set_shared_memory("out", 256)
    score.set_shared_memory("out", 256, offset=256)
    answer = client.infer("sst", [text, texts_tensor(module, "text_pair", PAIRS)], outputs=[label, score])

    shape = list(wire.as_numpy("score").shape)
    labels = shm.get_contents_as_numpy(out, np.object_, [len(TEXTS), 1], offset=512)
    scores = shm.get_contents_as_numpy(out, np.float32, shape, offset=768)
    assert labels.tolist() == wire.as_numpy("label").tolist()
    np.testing.assert_allclose(scores, wire.as_numpy("score"), rtol=1e-5, atol=1e-6)
    if protocol == "grpc":  # the outputs listed as Triton lists them: no data, one empty raw entry each
        response = answer.get_response()
        assert [output.name for output in response.outputs] == ["label", "score"]
        assert [len(raw) for raw in response.raw_output_contents] == [0, 0]
        assert not any(output.parameters for output in response.outputs)
    else:  # no data, no parameters (perf_analyzer's HTTP client reads any parameters as binary data's)
        assert [sorted(output) for output in answer.get_response()["outputs"]] == [["datatype", "name", "shape"]] * 2

    client.unregister_system_shared_memory("in")
    assert list(status_of(client, protocol)) == ["out"]
    gone = refusal(lambda: client.infer("sst", [text], outputs=[module.InferRequestedOutput("label")]))
    assert "'in'" in str(gone) and code_of(gone) in ("404", "StatusCode.NOT_FOUND")
    client.unregister_system_shared_memory("never-registered")  # nothing to do, as Triton
    assert list(status_of(client, protocol)) == ["out"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_regions_and_placements_are_refused_with_what_is_wrong(
    served: tuple[str, dict[str, tuple[Any, Any]]], objects: Objects, protocol: str
) -> None:
    _, clients = served
    module, client = clients[protocol]
    bad_request = ("400", "StatusCode.INVALID_ARGUMENT")
    data = serialized(TEXTS).item()
    inputs, key = objects.create(f"bad_{protocol}", 4096)
    shm.set_shared_memory_region(inputs, [serialized(TEXTS)])
    client.register_system_shared_memory("r", key, 4096)

    taken = refusal(lambda: client.register_system_shared_memory("r", key, 16))
    assert "registered already" in str(taken) and code_of(taken) in ("409", "StatusCode.FAILED_PRECONDITION")
    for wrong_key, why in (("/../etc/passwd", "no shared memory object's name"),
                           (f"/bertserve_test_{os.getpid()}_missing", "unable to open"),
                           (key, "go past its end")):  # fmt: skip
        error = refusal(lambda wrong_key=wrong_key: client.register_system_shared_memory("other", wrong_key, 8192))
        assert why in str(error) and code_of(error) in bad_request, str(error)
    missing = refusal(lambda: client.get_system_shared_memory_status("nope"))
    assert code_of(missing) in ("404", "StatusCode.NOT_FOUND")

    def infer_text(byte_size: int, offset: int = 0, out: tuple[int, int] | None = None, **output: Any) -> Any:
        text = module.InferInput("text", [len(TEXTS)], "BYTES")
        text.set_shared_memory("r", byte_size, offset=offset)
        label = module.InferRequestedOutput("label", **output)
        if out is not None:
            label.set_shared_memory("r", out[0], offset=out[1])
        return client.infer("sst", [text], outputs=[label])

    for call, why in (
        (lambda: infer_text(len(data), offset=4090), "go past its end"),
        (lambda: infer_text(len(data) - 3), "ends inside an element"),
        (lambda: infer_text(len(data), out=(4, 2048)), "needs"),  # the label does not fit in 4 bytes
        (lambda: infer_text(len(data), out=(8, 4092)), "go past its end"),
    ):
        error = refusal(call)
        assert why in str(error) and code_of(error) in bad_request, str(error)

    assert infer_text(len(data)).as_numpy("label").shape == (len(TEXTS), 1)
    os.truncate(f"/dev/shm/{key.removeprefix('/')}", 1024)  # the client shrinks the object
    shrunk = refusal(lambda: infer_text(len(data)))
    assert "shrank to 1024 bytes" in str(shrunk) and code_of(shrunk) in bad_request
    assert client.is_server_live()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrent_clients_each_get_their_own_answers_in_their_own_regions(
    served: tuple[str, dict[str, tuple[Any, Any]]], objects: Objects, protocol: str
) -> None:
    url, clients = served
    module, shared_client = clients[protocol]
    workers, rounds = 6, 5
    texts = [[f"{word} number {index}" for word in ("great", "awful", "fine")] for index in range(workers)]
    asked = [module.InferRequestedOutput("score")]
    wire = [shared_client.infer("sst", [texts_tensor(module, "text", batch)], outputs=asked).as_numpy("score")
            for batch in texts]  # fmt: skip
    assert len({row.tobytes() for row in wire}) == workers  # each worker's answer is its own

    def work(worker: int) -> list[np.ndarray]:
        client = httpclient.InferenceServerClient(url.removeprefix("http://")) if protocol == "http" else shared_client
        tensor = serialized(texts[worker])
        size = len(tensor.item())
        handle, key = objects.create(f"w{worker}_{protocol}", 4096)
        shm.set_shared_memory_region(handle, [tensor])
        client.register_system_shared_memory(f"w{worker}", key, 4096)
        seen = []
        for _ in range(rounds):
            text = module.InferInput("text", [len(texts[worker])], "BYTES")
            text.set_shared_memory(f"w{worker}", size)
            score = module.InferRequestedOutput("score")
            score.set_shared_memory(f"w{worker}", 1024, offset=2048)
            client.infer("sst", [text], outputs=[score])
            seen.append(shm.get_contents_as_numpy(handle, np.float32, [len(texts[worker]), 1], offset=2048).copy())
            shm.set_shared_memory_region(handle, [np.full(16, np.nan, dtype=np.float32)], offset=2048)  # clear it
        return seen

    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(work, range(workers)))
    for worker, seen in enumerate(answers):  # batched with others' rows, padded otherwise: equal to 1e-5
        for scores in seen:
            np.testing.assert_allclose(scores, wire[worker], rtol=1e-5, atol=1e-5, err_msg=f"worker {worker}")
    assert len(status_of(shared_client, protocol)) == workers


def test_a_grpc_stream_reads_and_writes_shared_memory(
    served: tuple[str, dict[str, tuple[Any, Any]]], objects: Objects
) -> None:
    _, clients = served
    _, client = clients["grpc"]
    wire = client.infer(
        "sst", [texts_tensor(grpcclient, "text", TEXTS)], outputs=[grpcclient.InferRequestedOutput("label")]
    )
    tensor = serialized(TEXTS)
    handle, key = objects.create("stream", 4096)
    shm.set_shared_memory_region(handle, [tensor])
    client.register_system_shared_memory("s", key, 4096)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for offset in (1024, 2048):  # two requests on the stream, each writing its own place
            text = grpcclient.InferInput("text", [len(TEXTS)], "BYTES")
            text.set_shared_memory("s", len(tensor.item()))
            label = grpcclient.InferRequestedOutput("label")
            label.set_shared_memory("s", 512, offset=offset)
            client.async_stream_infer("sst", [text], outputs=[label])
        for _ in range(2):
            result, error = answers.get(timeout=30)
            assert error is None and [output.name for output in result.get_response().outputs] == ["label"]
    finally:
        client.stop_stream()
    for offset in (1024, 2048):
        labels = shm.get_contents_as_numpy(handle, np.object_, [len(TEXTS), 1], offset=offset)
        assert labels.tolist() == wire.as_numpy("label").tolist()


def test_rest_takes_one_source_per_input_and_no_classification_in_shared_memory(
    served: tuple[str, dict[str, tuple[Any, Any]]], objects: Objects
) -> None:
    url, clients = served
    _, client = clients["http"]
    _, key = objects.create("rest", 1024)
    client.register_system_shared_memory("r", key, 1024)
    region = {"shared_memory_region": "r", "shared_memory_byte_size": 64}
    for inputs, outputs, why in (
        ([{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"], "parameters": region}], None,
         "has data and shared_memory_region"),
        ([{"name": "text", "shape": [1], "datatype": "BYTES", "parameters": {"shared_memory_offset": 8}}], None,
         "shared_memory_offset needs shared_memory_region"),
        ([{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}],
         [{"name": "score", "parameters": {**region, "classification": 2}}], "cannot go together"),
        ([{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}],
         [{"name": "score", "parameters": {**region, "shared_memory_byte_size": -1}}], "must be a byte count"),
    ):  # fmt: skip
        answer = httpx.post(f"{url}/v2/models/sst/infer", json={"inputs": inputs, "outputs": outputs})
        assert answer.status_code == 400 and why in answer.json()["error"], answer.text
    assert "system_shared_memory" in httpx.get(f"{url}/v2").json()["extensions"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cuda_shared_memory_has_no_regions_here(served: tuple[str, dict[str, tuple[Any, Any]]], protocol: str) -> None:
    _, clients = served
    _, client = clients[protocol]
    listed = client.get_cuda_shared_memory_status(**({"as_json": True} if protocol == "grpc" else {}))
    assert listed in ([], {})
    error = refusal(lambda: client.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 1024))
    assert "CUDA shared memory is not supported" in str(error)
    assert code_of(error) in ("400", "StatusCode.INVALID_ARGUMENT")
    client.unregister_cuda_shared_memory()  # nothing registered: nothing to do


def test_off_by_default_with_the_setting_named(tiny_models: dict[str, TinyModel]) -> None:
    grpc_port = free_port()
    with real_server_for({"sst": tiny_models["text-classification"].bundle}, grpc_port=grpc_port, tune=False) as url:
        key = f"/bertserve_test_{os.getpid()}_off"
        handle = shm.create_shared_memory_region("off", key, 64)
        try:
            for protocol, (module, client) in clients_for(url, grpc_port).items():
                error = refusal(lambda client=client: client.register_system_shared_memory("r", key, 64))
                assert "--allow-client-shm" in str(error), protocol
                text = module.InferInput("text", [1], "BYTES")
                text.set_shared_memory("r", 8)
                error = refusal(lambda client=client, text=text: client.infer("sst", [text]))
                assert "--allow-client-shm" in str(error), protocol
        finally:
            shm.destroy_shared_memory_region(handle)


def test_api_keys_guard_the_regions(tiny_models: dict[str, TinyModel]) -> None:
    grpc_port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, grpc_port=grpc_port, tune=False, allow_client_shm=True, api_keys=["k"]) as url:
        key = f"/bertserve_test_{os.getpid()}_keys"
        handle = shm.create_shared_memory_region("keys", key, 64)
        try:
            for protocol, (_, client) in clients_for(url, grpc_port).items():
                keyed = {"authorization": "Bearer k"}
                for call in (lambda client=client: client.register_system_shared_memory("r", key, 64),
                             lambda client=client: client.get_system_shared_memory_status(),
                             lambda client=client: client.unregister_system_shared_memory()):  # fmt: skip
                    assert code_of(refusal(call)) in ("401", "StatusCode.UNAUTHENTICATED"), protocol
                client.register_system_shared_memory("r", key, 64, headers=keyed)
                assert list(status_of(client, protocol, headers=keyed)) == ["r"]
                client.unregister_system_shared_memory(headers=keyed)
        finally:
            shm.destroy_shared_memory_region(handle)
