"""OpenTelemetry traces, received over OTLP by a real receiver in the test (protocol buffers decoded with
opentelemetry-proto): the caller's ``traceparent`` is continued over HTTP and gRPC, each request has its server span
and a child per stage with its attributes, and the access line carries the trace id. Without ``OTEL_*`` nothing is
configured at all."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.sdk.trace")

from service.settings import Settings
from tests.service.apptools import free_port, real_server, serving
from tests.service.otlp_receiver import Receiver, attributes, receiving
from tests.service.tiny_models import TinyModel

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
STAGES = {"read body", "admission", "tokenize", "queue wait", "batch run", "post-process"}


@pytest.fixture()
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    with receiving(monkeypatch) as server:
        yield server


def check_stages(spans: list[Any], server_name: str) -> Any:
    """The server span (a child of the caller's span) and its stages' spans (children of it, inside its time)."""
    (server,) = [span for span in spans if span.name == server_name]
    assert server.parent_span_id.hex() == CALLER_SPAN
    assert server.kind == server.SPAN_KIND_SERVER
    children = [span for span in spans if span.parent_span_id == server.span_id]
    assert {span.name for span in children} >= STAGES - {"read body"}
    for child in children:
        assert server.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
        assert child.end_time_unix_nano <= server.end_time_unix_nano
    batch = next(span for span in children if span.name == "batch run")
    batch_attributes = attributes(batch)
    assert batch_attributes["bertserve.batch.rows"] >= 2
    assert batch_attributes["bertserve.batch.padded_tokens"] >= batch_attributes["bertserve.batch.rows"]
    assert batch_attributes["bertserve.batch.model_seconds"] > 0
    return server, children


def test_http_and_grpc_requests_continue_the_callers_trace_with_a_span_per_stage(
    receiver: Receiver, text_classification_model: TinyModel, caplog: pytest.LogCaptureFixture
) -> None:
    import grpc

    from service.grpc.protocol import MESSAGES, METHODS, SERVICE

    caplog.set_level(logging.INFO, logger="bertserve.access")
    grpc_port = free_port()
    settings = Settings(
        models=[f"sst={text_classification_model.bundle}"], port=free_port(), grpc_port=grpc_port, intra_op_threads=1
    )  # type: ignore[call-arg]
    traceparent = f"00-{TRACE_ID}-{CALLER_SPAN}-01"
    with real_server(settings) as url:
        answer = httpx.post(
            f"{url}/v1/text-classification",
            json={"inputs": ["a fine film", "a dull one"]},
            headers={"traceparent": traceparent},
        )
        assert answer.status_code == 200
        spans = receiver.received(TRACE_ID, at_least=len(STAGES) + 1)
        server, children = check_stages(spans, "POST /v1/text-classification")
        server_attributes = attributes(server)
        assert server_attributes["http.route"] == "/v1/text-classification"
        assert server_attributes["http.response.status_code"] == 200
        assert server_attributes["bertserve.model"] == "sst" and server_attributes["bertserve.rows"] == 2
        assert "read body" in {span.name for span in children}
        lines = [record.getMessage() for record in caplog.records if record.name == "bertserve.access"]
        assert any("/v1/text-classification 200" in line and f"trace_id={TRACE_ID}" in line for line in lines)

        grpc_trace = "0af7651916cd43dd8448eb211c80319c"
        request = MESSAGES["ModelInferRequest"](model_name="sst")
        text = request.inputs.add(name="text", datatype="BYTES", shape=[2]).contents.bytes_contents
        text.extend([b"a fine film", b"a dull one"])
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            infer = channel.unary_unary(
                f"/{SERVICE}/ModelInfer",
                request_serializer=METHODS["ModelInfer"][0].SerializeToString,
                response_deserializer=METHODS["ModelInfer"][1].FromString,
            )
            infer(request, metadata=(("traceparent", f"00-{grpc_trace}-{CALLER_SPAN}-01"),), timeout=10)
        spans = receiver.received(grpc_trace, at_least=len(STAGES))
        server, _ = check_stages(spans, f"{SERVICE}/ModelInfer")
        assert attributes(server)["rpc.system"] == "grpc" and attributes(server)["rpc.grpc.status_code"] == 0


def test_without_otel_settings_nothing_is_configured_and_the_trace_level_is_off(
    text_classification_model: TinyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(models=[f"sst={text_classification_model.bundle}"], intra_op_threads=1)  # type: ignore[call-arg]

    async def main() -> None:
        async with serving(settings) as (app, client):
            assert app.state.core.tracing is None
            answer = await client.post("/v1/text-classification", json={"inputs": "fine"})
            assert answer.status_code == 200
            # Triton's trace settings: the level is OFF, and turning it on says what to set; the rest may change
            trace_settings = (await client.get("/v2/trace/setting")).json()
            assert trace_settings["trace_level"] == ["OFF"] and trace_settings["trace_mode"] == "opentelemetry"
            refused = await client.post("/v2/models/sst/trace/setting", json={"trace_level": ["TIMESTAMPS"]})
            assert refused.status_code == 400 and "OTEL_EXPORTER_OTLP_ENDPOINT" in refused.json()["error"]
            changed = await client.post("/v2/trace/setting", json={"trace_rate": "5"})
            assert changed.status_code == 200 and changed.json()["trace_rate"] == "5"
            assert (await client.post("/v2/trace/setting", content=b"[1]")).status_code == 400

    asyncio.run(main())


def test_fastapis_own_telemetry_stays_off_where_a_global_tracer_provider_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under auto-instrumentation (a global tracer provider) FastAPI's native telemetry would add a second server span
    to every request beside the service's own."""
    telemetry = pytest.importorskip("fastapi.telemetry._asgi")
    from opentelemetry.sdk.trace import TracerProvider

    from service.app import create_app

    monkeypatch.setattr(telemetry.trace, "get_tracer_provider", lambda: TracerProvider())
    plain = telemetry.NativeTelemetry({**create_app(Settings(port=free_port()))._telemetry, "tracing": True})
    assert plain.enabled()  # FastAPI's default would trace here
    assert not create_app(Settings(port=free_port()))._native_telemetry.enabled()
