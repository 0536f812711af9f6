"""The Open Inference Protocol v2 over gRPC: a transport over ``service.core.ServiceCore`` beside HTTP, no FastAPI.

``oip_v2.proto`` is the protocol; ``python -m service.grpc.build`` compiles it (the build does: make setup, the
images); ``service.grpc.server`` serves it (``--grpc-port``).
"""
