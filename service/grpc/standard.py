"""gRPC's own services beside the Open Inference Protocol, from the field's servicers: health checking
(``grpc.health.v1.Health``, grpcio-health-checking: what Kubernetes' ``grpc`` probes and grpc_health_probe call) and
server reflection (grpcio-reflection: ``grpcurl list``, Postman). Both answer without an API key, as the protocol's
ServerLive and ServerReady do, and stay out of the request metrics and access lines.

Health is SERVING for the server (``""``) and the inference service while the core is ready (every model warm, not
draining: ServerReady's answer), NOT_SERVING otherwise, read at each Check and Watch and every second for the Watch
streams; it turns NOT_SERVING for good when the transport stops. Reflection describes the inference service (from
the descriptors the build compiled), health and itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import SERVICE_NAME as HEALTH_SERVICE
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

from service.grpc.protocol import FILES, SERVICE

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
FOLLOW_INTERVAL_S = 1.0


class ReadinessHealth(health_aio.HealthServicer):
    """``grpc.health.v1.Health`` whose status is ``ready()``."""

    def __init__(self, ready: Callable[[], bool]) -> None:
        super().__init__()
        self._ready = ready
        self._status: int | None = None

    async def refresh(self) -> None:
        status = SERVING if self._ready() else NOT_SERVING
        if status != self._status:
            self._status = status
            for service in ("", SERVICE):
                await self.set(service, status)

    async def Check(self, request: Any, context: Any) -> Any:
        await self.refresh()
        return await super().Check(request, context)

    async def Watch(self, request: Any, context: Any) -> None:
        await self.refresh()
        await super().Watch(request, context)

    async def follow(self) -> None:
        """Keep Watch streams current (until cancelled)."""
        while True:
            await self.refresh()
            await asyncio.sleep(FOLLOW_INTERVAL_S)


def reflection_pool() -> descriptor_pool.DescriptorPool:
    """The inference service's descriptors, health's and reflection's, in one pool of their own."""
    pool = descriptor_pool.DescriptorPool()
    for file in FILES:
        pool.Add(file)
    for module in (health_pb2, reflection_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    return pool


def add_standard_services(server: grpc.aio.Server, ready: Callable[[], bool]) -> ReadinessHealth:
    """Health and reflection on ``server``; the health servicer, for the transport to follow and shut down."""
    health = ReadinessHealth(ready)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    names = (SERVICE, HEALTH_SERVICE, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server, pool=reflection_pool())
    return health
