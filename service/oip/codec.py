"""Open Inference Protocol tensors in and out of HTTP bodies: JSON ``data`` and the binary tensor data extension.

Binary extension (what tritonclient sends by default): the body is the JSON object, then the tensors' bytes;
``Inference-Header-Content-Length`` gives the JSON's length and each binary tensor's ``binary_data_size`` its bytes.
Elements are little-endian, row-major; a BYTES element is a 4-byte length followed by its bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.api.bodies import encode_json
from service.errors import BadRequest
from service.oip.shared_memory import Placement, placement_of
from service.schemas.v2 import V2InferRequest

HEADER_LENGTH = "Inference-Header-Content-Length"
EXTENSIONS = (
    "binary_tensor_data",
    "classification",
    "system_shared_memory",
    "model_repository",
    "statistics",
    "model_configuration",
    "logging",
    "trace",
)
NUMERIC_DTYPES: dict[str, np.dtype[Any]] = {"FP32": np.dtype("<f4"), "INT64": np.dtype("<i8")}
LENGTH = struct.Struct("<I")
SharedReader = Callable[[Placement, str], bytes]  # (where, input name) -> the input's bytes in shared memory


@dataclass(frozen=True)
class OutputTensor:
    name: str
    datatype: str  # BYTES, FP32 or INT64
    shape: tuple[int, ...]
    values: np.ndarray | list[str]  # row-major; strings for BYTES

    def json_data(self) -> list[Any] | np.ndarray:
        """The values, flat, for a JSON answer (which writes an array as a list)."""
        if self.datatype == "BYTES":
            return list(self.values)
        return np.asarray(self.values, dtype=NUMERIC_DTYPES[self.datatype]).reshape(-1)

    def binary_data(self) -> bytes:
        if self.datatype == "BYTES":
            encoded = [str(value).encode() for value in self.values]
            return b"".join(LENGTH.pack(len(value)) + value for value in encoded)
        return np.ascontiguousarray(self.values, dtype=NUMERIC_DTYPES[self.datatype]).tobytes()


def split_body(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """The JSON part and the binary part of an infer request's body."""
    if header_length is None:
        return body, b""
    if not header_length.strip().isdigit() or int(header_length) > len(body):
        raise BadRequest(f"{HEADER_LENGTH} is {header_length!r}; the body has {len(body)} bytes")
    length = int(header_length)
    return body[:length], body[length:]


def decode_inputs(request: V2InferRequest, binary: bytes, shared: SharedReader | None = None) -> dict[str, list[str]]:
    """Each input's elements, in row-major order, by name. Every input the service takes is text: BYTES. An input's
    data is JSON ``data``, binary data after the JSON, or in shared memory (``shared`` reads it: Triton's system
    shared memory extension), one of the three."""
    tensors: dict[str, list[str]] = {}
    offset = 0
    for tensor in request.inputs:
        if tensor.name in tensors:
            raise BadRequest(f"input {tensor.name!r} is given twice")
        if tensor.datatype != "BYTES":
            raise BadRequest(f"input {tensor.name!r} is {tensor.datatype}; every input is text, datatype BYTES")
        parameters = tensor.parameters or {}
        size = parameters.get("binary_data_size")
        where = placement_of(parameters, tensor.name)
        sources = [name for name, given in (("data", tensor.data is not None), ("binary_data_size", size is not None),
                                            ("shared_memory_region", where is not None)) if given]  # fmt: skip
        if len(sources) != 1:
            found = " and ".join(sources) if sources else "no data"
            raise BadRequest(
                f"input {tensor.name!r} has {found}: give one of data, parameters.binary_data_size, "
                "parameters.shared_memory_region"
            )
        if where is not None:
            if shared is None:
                raise BadRequest(f"input {tensor.name!r}: shared memory is not read on this route")
            values = bytes_elements(shared(where, tensor.name), tensor.name)
        elif size is None:
            values = _json_strings(tensor.data or [], tensor.name)
        else:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise BadRequest(f"input {tensor.name!r}: binary_data_size must be a byte count, not {size!r}")
            chunk = binary[offset : offset + size]
            if len(chunk) != size:
                raise BadRequest(f"input {tensor.name!r}: the body ends before its {size} bytes of binary data")
            offset += size
            values = bytes_elements(chunk, tensor.name)
        tensors[tensor.name] = shaped(values, tensor.shape, tensor.name)
    if offset != len(binary):
        raise BadRequest(f"{len(binary) - offset} bytes after the JSON belong to no input's binary_data_size")
    return tensors


def _json_strings(data: Sequence[Any], name: str) -> list[str]:
    values: list[str] = []
    pending: list[Any] = [iter(data)]
    while pending:
        item = next(pending[-1], StopIteration)
        if item is StopIteration:
            pending.pop()
        elif isinstance(item, list):
            pending.append(iter(item))
        elif isinstance(item, str):
            values.append(item)
        else:
            raise BadRequest(f"input {name!r}: BYTES elements are JSON strings, not {type(item).__name__}")
    return values


def shaped(values: list[str], shape: Sequence[int], name: str) -> list[str]:
    """``values``, which must be as many as ``shape`` holds."""
    expected = math.prod(shape)
    if len(values) != expected:
        raise BadRequest(f"input {name!r}: shape {list(shape)} holds {expected} elements, its data {len(values)}")
    return values


def bytes_elements(chunk: bytes, name: str) -> list[str]:
    """A BYTES tensor's raw data (each element a 4-byte little-endian length, then its UTF-8 text) as strings."""
    values: list[str] = []
    offset = 0
    while offset < len(chunk):
        if offset + LENGTH.size > len(chunk):
            raise BadRequest(f"input {name!r}: binary BYTES data ends inside an element's 4-byte length")
        (length,) = LENGTH.unpack_from(chunk, offset)
        offset += LENGTH.size
        element = chunk[offset : offset + length]
        if len(element) != length:
            raise BadRequest(f"input {name!r}: binary BYTES data ends inside an element")
        offset += length
        try:
            values.append(element.decode())
        except UnicodeDecodeError:
            raise BadRequest(f"input {name!r}: element {len(values)} is not UTF-8 text") from None
    return values


def encode_response(
    header: dict[str, Any],
    outputs: Sequence[OutputTensor],
    binary: set[str],
    placed: Set[str] = frozenset(),
) -> tuple[bytes, int]:
    """The response body (JSON, then the binary outputs' bytes) and the JSON's length.

    Outputs named in ``binary`` carry ``parameters.binary_data_size``, those in ``placed`` (written to shared
    memory) nothing more than their name, datatype and shape (as Triton answers); the others carry ``data``.
    """
    entries: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for output in outputs:
        entry: dict[str, Any] = {"name": output.name, "datatype": output.datatype, "shape": list(output.shape)}
        if output.name in placed:
            entries.append(entry)
            continue
        if output.name in binary:
            blob = output.binary_data()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = output.json_data()
        entries.append(entry)
    content = encode_json({**header, "outputs": entries})
    return content + b"".join(blobs), len(content)
