"""``python -m service.grpc.build``: compile ``oip_v2.proto`` into ``oip_v2.binpb`` beside it (a serialized
FileDescriptorSet), with grpcio-tools' protoc. The build runs it (``make setup``, the images); the output is not
committed. ``service.grpc.protocol`` builds the message classes from it in a descriptor pool of its own: generated
``_pb2`` modules would register ``inference.*`` in protobuf's default pool, where tritonclient's (the same protocol,
Triton's file) already are, and the two could not be imported into one process."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

PROTO = Path(__file__).with_name("oip_v2.proto")
DESCRIPTORS = PROTO.with_suffix(".binpb")

logger = logging.getLogger(__name__)


def build() -> None:
    """Compile the proto; RuntimeError with protoc's status when it fails (protoc prints why)."""
    import grpc_tools
    from grpc_tools import protoc

    well_known = Path(grpc_tools.__file__).with_name("_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO.parent}",
        f"-I{well_known}",
        f"--descriptor_set_out={DESCRIPTORS}",
        "--include_imports",
        PROTO.name,
    ]
    status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"protoc failed on {PROTO} (status {status})")
    logger.info("compiled %s into %s", PROTO, DESCRIPTORS)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        build()
    except RuntimeError as exc:
        logger.error("%s", exc)
        sys.exit(1)
