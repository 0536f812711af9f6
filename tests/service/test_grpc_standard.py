"""gRPC's standard services beside the Open Inference Protocol, through their own clients: health checking
(``grpc.health.v1`` stubs, what Kubernetes' grpc probes call) answers SERVING while the server is ready and follows
readiness both ways, without an API key; server reflection (grpcio-reflection's client database, what grpcurl uses)
describes every method of the inference service with Triton's own messages, field for field and number for number."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import descriptor_pool

from service.settings import Settings
from tests.service.apptools import free_port, real_server_for, serving
from tests.service.tiny_models import TinyModel

grpc = pytest.importorskip("grpc")
grpcclient = pytest.importorskip("tritonclient.grpc")
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # noqa: E402
    ProtoReflectionDescriptorDatabase,
)
from tritonclient.grpc import service_pb2 as triton  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

SERVICE = "inference.GRPCInferenceService"
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def target(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    """host:port of a real server's gRPC transport, with an API key on the protocol."""
    port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, grpc_port=port, tune=False, api_keys=["grpc-key"]):
        yield f"127.0.0.1:{port}"


def test_health_is_serving_without_a_key(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            health.Check(health_pb2.HealthCheckRequest(service="nope"))
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(InferenceServerException, match="API key"):  # the protocol's calls still want the key
        grpcclient.InferenceServerClient(target).get_server_metadata()


def same_message(ours: Any, theirs: Any, seen: set[str]) -> None:
    """Every field of ``ours`` is ``theirs``'s of that name: number, type, label; nested messages and enums too."""
    if ours.full_name in seen:
        return
    seen.add(ours.full_name)
    assert ours.full_name == theirs.full_name
    for field in ours.fields:
        other = theirs.fields_by_name[field.name]
        assert (field.number, field.type, field.is_repeated) == (other.number, other.type, other.is_repeated), field
        if field.message_type is not None:
            same_message(field.message_type, other.message_type, seen)
        if field.enum_type is not None:
            known = {value.name: value.number for value in other.enum_type.values}
            assert {value.name: value.number for value in field.enum_type.values}.items() <= known.items()


def test_reflection_describes_triton_s_messages(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= set(
            database.get_services()
        )
        described = descriptor_pool.DescriptorPool(database).FindServiceByName(SERVICE)
        theirs = triton.DESCRIPTOR.services_by_name["GRPCInferenceService"]
        assert {"ModelInfer", "ModelStatistics", "ModelConfig", "RepositoryIndex"} <= set(described.methods_by_name)
        seen: set[str] = set()
        for method in described.methods:
            other = theirs.methods_by_name[method.name]
            same_message(method.input_type, other.input_type, seen)
            same_message(method.output_type, other.output_type, seen)
        assert "inference.ModelConfig" in seen and "inference.ModelInput" in seen


def test_health_follows_readiness_both_ways(tiny_models: dict[str, TinyModel]) -> None:
    settings = Settings(
        models=[f"sst={tiny_models['text-classification'].bundle}"], grpc_port=free_port(), intra_op_threads=1,
        tune=False,
    )  # type: ignore[call-arg]  # fmt: skip

    async def main() -> None:
        async with (
            serving(settings) as (app, _),
            grpc.aio.insecure_channel(f"127.0.0.1:{settings.grpc_port}") as channel,
        ):
            health = health_pb2_grpc.HealthStub(channel)
            watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE))
            assert (await watch.read()).status == SERVING
            app.state.registry.shutting_down = True  # what SIGTERM sets first
            assert (await health.Check(health_pb2.HealthCheckRequest())).status == NOT_SERVING
            assert (await asyncio.wait_for(watch.read(), 5)).status == NOT_SERVING
            app.state.registry.shutting_down = False
            assert (await health.Check(health_pb2.HealthCheckRequest(service=SERVICE))).status == SERVING
            assert (await asyncio.wait_for(watch.read(), 5)).status == SERVING
            watch.cancel()

    asyncio.run(main())
