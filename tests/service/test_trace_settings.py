"""Triton's trace extension through tritonclient's ``get_trace_settings`` / ``update_trace_settings`` (REST and gRPC)
against a real server whose spans go over OTLP to a real receiver in the test: the settings overlay, follow and
clear as Triton's do, what is not served is refused with nothing changed, and the settings choose which requests
are traced (rate, a model's level, count), read off the spans the receiver gets. Without tracing configured
(``test_tracing.py``) the level is OFF and turning it on says what to set."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.sdk.trace")
grpcclient = pytest.importorskip("tritonclient.grpc")

import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

from tests.service.apptools import free_port, real_server_for  # noqa: E402
from tests.service.otlp_receiver import Receiver, attributes, receiving  # noqa: E402
from tests.service.tiny_models import TinyModel  # noqa: E402

DEFAULTS = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1", "trace_mode": "opentelemetry",
            "trace_file": "", "log_frequency": "0"}  # fmt: skip
CLEAR = dict.fromkeys(("trace_level", "trace_rate", "trace_count"))
CALLER_SPAN = "00f067aa0ba902b7"
STAGES = {"admission", "tokenize", "queue wait", "batch run", "post-process"}  # a gRPC request's (no body to read)
SERVICE = "inference.GRPCInferenceService"


class Served:
    def __init__(self, url: str, grpc_port: int, receiver: Receiver) -> None:
        self.url, self.receiver = url, receiver
        self.http = httpclient.InferenceServerClient(url.removeprefix("http://"))
        self.grpc_target = f"127.0.0.1:{grpc_port}"
        self.grpc = grpcclient.InferenceServerClient(self.grpc_target)
        self.next_trace = 0

    def reset(self) -> None:
        self.http.update_trace_settings(settings=CLEAR)
        self.http.update_trace_settings(model_name="sst", settings=CLEAR)

    def trace_id(self) -> str:
        self.next_trace += 1
        return f"{0x5EED0000 + self.next_trace:032x}"

    def v2_infer(self) -> str:
        """An OIP REST infer request of model sst under a caller's sampled trace; its trace id."""
        trace = self.trace_id()
        body = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["a fine film"]}]}
        headers = {"traceparent": f"00-{trace}-{CALLER_SPAN}-01"}
        assert httpx.post(f"{self.url}/v2/models/sst/infer", json=body, headers=headers).status_code == 200
        return trace

    def grpc_infer(self) -> str:
        trace = self.trace_id()
        text = grpcclient.InferInput("text", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"a dull film"], dtype=object))
        self.grpc.infer("sst", [text], headers={"traceparent": f"00-{trace}-{CALLER_SPAN}-01"})
        return trace

    def v1_infer(self) -> str:
        trace = self.trace_id()
        headers = {"traceparent": f"00-{trace}-{CALLER_SPAN}-01"}
        answer = httpx.post(
            f"{self.url}/v1/text-classification", json={"model": "sst", "inputs": "fine"}, headers=headers
        )
        assert answer.status_code == 200
        return trace

    def stream(self, requests: int) -> str:
        """``requests`` infer requests of model sst on one gRPC stream under a caller's sampled trace; its trace id."""
        trace, answers = self.trace_id(), queue.Queue[Any]()
        client = grpcclient.InferenceServerClient(self.grpc_target)
        client.start_stream(
            lambda result, error: answers.put(error), headers={"traceparent": f"00-{trace}-{CALLER_SPAN}-01"}
        )
        for index in range(requests):
            text = grpcclient.InferInput("text", [1], "BYTES")
            text.set_data_from_numpy(np.array([f"film number {index}".encode()], dtype=object))
            client.async_stream_infer("sst", [text])
        client.stop_stream()
        assert [answers.get(timeout=10) for _ in range(requests)] == [None] * requests
        return trace

    def traced(self, traces: list[str]) -> list[str]:
        """Which of ``traces`` the receiver got a span of, read once a later request's trace (global settings back
        to their start, so it is traced) has arrived: spans leave in the order they end."""
        self.http.update_trace_settings(settings=CLEAR)
        marker = self.v1_infer()
        self.receiver.received(marker, at_least=1)
        time.sleep(0.2)
        with self.receiver.lock:
            got = {span.trace_id.hex() for span in self.receiver.spans}
        return [trace for trace in traces if trace in got]


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, TinyModel]) -> Iterator[Served]:
    grpc_port = free_port()
    with pytest.MonkeyPatch.context() as patch, receiving(patch) as receiver:
        bundles = {"sst": tiny_models["text-classification"].bundle}
        with real_server_for(bundles, grpc_port=grpc_port, tune=False) as url:
            yield Served(url, grpc_port, receiver)


def grpc_view(served: Served, model: str | None = None) -> dict[str, list[str]]:
    reply = served.grpc.get_trace_settings(model_name=model)
    return {name: list(setting.value) for name, setting in reply.settings.items()}


def as_grpc(view: dict[str, Any]) -> dict[str, list[str]]:
    return {name: value if isinstance(value, list) else [value] for name, value in view.items()}


def test_a_models_settings_overlay_the_global_ones_and_clear_over_both_clients(served: Served) -> None:
    served.reset()
    http, grpc = served.http, served.grpc
    assert http.get_trace_settings() == DEFAULTS == http.get_trace_settings(model_name="sst")
    assert grpc_view(served) == as_grpc(DEFAULTS) == grpc_view(served, "sst")
    assert {"trace", "classification"} <= set(http.get_server_metadata()["extensions"])

    assert http.update_trace_settings(model_name="sst", settings={"trace_rate": "3"}) == {**DEFAULTS, "trace_rate": "3"}
    assert http.get_trace_settings() == DEFAULTS
    # what the model does not set follows the global setting as it changes (a rate of 1000: nothing here is traced
    # to count the traces down)
    assert grpc.update_trace_settings(settings={"trace_count": "7", "trace_rate": "1000"}, as_json=True)
    assert http.get_trace_settings(model_name="sst") == {**DEFAULTS, "trace_rate": "3", "trace_count": "7"}
    assert grpc_view(served, "sst") == as_grpc(http.get_trace_settings(model_name="sst"))

    # clearing: the model's setting follows the global one again; a global one goes back to its value at start
    assert grpc_view(served) == as_grpc({**DEFAULTS, "trace_count": "7", "trace_rate": "1000"})
    grpc.update_trace_settings(model_name="sst", settings={"trace_rate": None})
    assert http.get_trace_settings(model_name="sst") == {**DEFAULTS, "trace_count": "7", "trace_rate": "1000"}
    assert http.update_trace_settings(settings={"trace_count": None, "trace_rate": None}) == DEFAULTS
    assert http.get_trace_settings(model_name="sst") == DEFAULTS


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"trace_rate": "5", "trace_level": ["TENSORS"]}, "TENSORS is not served"),
        ({"trace_rate": "0"}, "at least 1"),
        ({"trace_count": "-2"}, "at least -1"),
        ({"trace_rate": "often"}, "whole number"),
        ({"trace_level": ["OFF", "TIMESTAMPS"]}, "OFF cannot go with"),
        ({"trace_level": ["LOUD"]}, "unknown trace level 'LOUD'"),
        ({"trace_file": "/tmp/trace.json"}, "OTLP exporter"),
        ({"log_frequency": "50"}, "OTLP exporter"),
        ({"trace_mode": "triton"}, "OpenTelemetry spans"),
        ({"trace_rate": "5", "trace_sampler": "always"}, "unknown trace setting 'trace_sampler'"),
    ],
)
def test_what_is_not_served_is_refused_with_nothing_changed(served: Served, changes: dict[str, Any], said: str) -> None:
    served.reset()
    for model in (None, "sst"):
        with pytest.raises(InferenceServerException) as http_error:
            served.http.update_trace_settings(model_name=model, settings=changes)
        assert said in http_error.value.message() and http_error.value.status() == "400"
        with pytest.raises(InferenceServerException) as grpc_error:
            served.grpc.update_trace_settings(model_name=model, settings=changes)
        assert said in grpc_error.value.message() and grpc_error.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert served.http.get_trace_settings(model_name=model) == DEFAULTS


def test_an_unknown_model_has_no_trace_settings(served: Served) -> None:
    with pytest.raises(InferenceServerException) as http_error:
        served.http.get_trace_settings(model_name="nope")
    assert http_error.value.status() == "404"
    with pytest.raises(InferenceServerException) as grpc_error:
        served.grpc.update_trace_settings(model_name="nope", settings={"trace_rate": "2"})
    assert grpc_error.value.status() == "StatusCode.NOT_FOUND"


def test_the_rate_traces_every_nth_request_globally_and_for_a_model(served: Served) -> None:
    served.reset()
    served.http.update_trace_settings(settings={"trace_rate": "2"})
    rest = [served.v2_infer() for _ in range(4)]
    assert served.traced(rest) == [rest[1], rest[3]]

    served.grpc.update_trace_settings(model_name="sst", settings={"trace_rate": "3"})
    calls = [served.grpc_infer() for _ in range(6)]
    others = [served.v1_infer() for _ in range(2)]  # the v1 route names its model in its body: global settings
    assert served.traced(calls + others) == [calls[2], calls[5], *others]


def test_a_models_level_and_count_decide_for_its_infer_requests_only(served: Served) -> None:
    served.reset()
    served.http.update_trace_settings(model_name="sst", settings={"trace_level": ["OFF"]})
    off = [served.v2_infer(), served.grpc_infer()]
    on = [served.v1_infer()]
    assert served.traced(off + on) == on

    served.http.update_trace_settings(model_name="sst", settings={"trace_level": None, "trace_count": "2"})
    counted = [served.v2_infer(), served.grpc_infer(), served.v2_infer()]
    assert served.traced(counted) == counted[:2]
    assert served.http.get_trace_settings(model_name="sst") == {**DEFAULTS, "trace_count": "0"}
    assert served.http.get_trace_settings()["trace_count"] == "-1"
    served.reset()


def test_each_request_on_a_stream_gets_its_span_and_follows_its_models_settings(served: Served) -> None:
    served.reset()
    trace = served.stream(3)
    spans = served.receiver.received(trace, at_least=3 * (len(STAGES) + 1))
    stream_spans = [span for span in spans if span.name == f"{SERVICE}/ModelStreamInfer"]
    assert len(stream_spans) == 3
    for span in stream_spans:
        assert span.parent_span_id.hex() == CALLER_SPAN and attributes(span)["bertserve.model"] == "sst"
        assert {child.name for child in spans if child.parent_span_id == span.span_id} == STAGES

    served.http.update_trace_settings(model_name="sst", settings={"trace_level": ["OFF"]})
    assert served.traced([served.stream(2)]) == []
    served.reset()
