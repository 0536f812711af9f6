"""The protocol's messages and service, from the descriptors the build compiled (``service.grpc.build``), in a
descriptor pool of this module's own: protobuf's default pool may hold tritonclient's copy of the same protocol.

``MESSAGES["ModelInferRequest"]`` is a message class; ``method_handlers(handler)`` is the generic handler that
routes each call of ``inference.GRPCInferenceService`` to ``handler(its name)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from service.grpc.build import DESCRIPTORS

SERVICE = "inference.GRPCInferenceService"
# What OpenTelemetry's gRPC conventions count as a server span's error
SERVER_ERRORS = frozenset(
    {grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
     grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS}
)  # fmt: skip
TRACE_KEYS = frozenset({"traceparent", "tracestate"})  # W3C trace context in metadata: what a span continues


def _load() -> tuple[list[Any], dict[str, Any], Any]:
    if not DESCRIPTORS.exists():
        raise ModuleNotFoundError(f"{DESCRIPTORS} is not built: run `python -m service.grpc.build` (make setup does)")
    files = list(descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTORS.read_bytes()).file)
    pool = descriptor_pool.DescriptorPool()
    for file in files:
        pool.Add(file)
    classes = message_factory.GetMessages(files, pool=pool)
    messages = {name.removeprefix("inference."): cls for name, cls in classes.items()}
    return files, messages, pool.FindServiceByName(SERVICE)


FILES, MESSAGES, _SERVICE = _load()  # FILES: the compiled FileDescriptorProtos (what reflection describes)
METHODS: dict[str, tuple[Any, Any]] = {
    method.name: (MESSAGES[method.input_type.name], MESSAGES[method.output_type.name]) for method in _SERVICE.methods
}
STREAMS = frozenset(method.name for method in _SERVICE.methods if method.client_streaming and method.server_streaming)


def method_handlers(handler: Callable[[str], Any]) -> grpc.GenericRpcHandler:
    """Every method of the service, answered by the coroutine (a stream's: the async generator) ``handler(name)``
    gives."""
    handlers = {}
    for name, (request, response) in METHODS.items():
        make = grpc.stream_stream_rpc_method_handler if name in STREAMS else grpc.unary_unary_rpc_method_handler
        handlers[name] = make(
            handler(name), request_deserializer=request.FromString, response_serializer=response.SerializeToString
        )
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def trace_carrier(context: Any) -> dict[str, str]:
    """The call's W3C trace context (``traceparent``, ``tracestate`` metadata): what its spans continue."""
    return {key: str(value) for key, value in context.invocation_metadata() or () if key in TRACE_KEYS}
