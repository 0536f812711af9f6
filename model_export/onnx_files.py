"""ONNX files written a tensor at a time, so that no step holds a second copy of the weights to save them.

- ``write_with_external_data``: a graph plus its initializers (raw little-endian bytes, e.g. straight from torch
  tensors) as ``NAME`` + ``NAME.data``: the working format between the export's steps.
- ``save_with_external_data``: a ModelProto whose initializers are in memory or in other data files -> ``NAME`` +
  ``NAME.data``.
- ``save_single_file``: a ModelProto whose initializers are in memory or in external data files -> one self-contained
  file, the format the bundle contract requires. ``onnx.save_model`` would serialise the whole model into one bytes
  object first (a second copy of every weight); here the graph is written without its initializers and each
  initializer follows as its own ``graph { initializer { ... } }`` record. Protobuf merges repeated occurrences of an
  embedded message field, so every reader (onnx, onnxruntime) parses the file as one graph holding all initializers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import onnx
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from model_export.validate import ExportError

# Graphs beyond protobuf's 2 GiB limit need external data, which the bundle contract forbids.
MAX_SINGLE_FILE_BYTES = 2**31 - 1
# Smaller tensors stay inside the graph file (onnxruntime's optimizer uses the same threshold).
EXTERNAL_MIN_BYTES = 1024
ALIGNMENT = 4096  # offsets of tensors in a data file, so that readers may map them page by page
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


GRAPH_FIELD = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
INITIALIZER_FIELD = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
RAW_DATA_FIELD = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number
COPY_SLICE = 16 * 1024 * 1024


def external_data_file(path: Path) -> Path:
    """Where this module's writers put ``path``'s external data: ``NAME.data`` beside it."""
    return path.with_name(f"{path.name}.data")


class _DataFile:
    """A data file being written: page-aligned tensors, appended from buffers or copied from other data files."""

    def __init__(self, out: BinaryIO, name: str) -> None:
        self.out, self.name = out, name

    def _start(self) -> int:
        self.out.write(b"\0" * (-self.out.tell() % ALIGNMENT))
        return self.out.tell()

    def append(self, tensor: onnx.TensorProto, raw: memoryview | bytes) -> None:
        offset = self._start()
        self.out.write(raw)
        self._point(tensor, offset, len(raw))

    def copy(self, tensor: onnx.TensorProto, source: Path, start: int, length: int) -> None:
        offset = self._start()
        _copy_slices(source, start, length, self.out)
        self._point(tensor, offset, length)

    def _point(self, tensor: onnx.TensorProto, offset: int, length: int) -> None:
        tensor.ClearField("raw_data")
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.name), ("offset", offset), ("length", length)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)


def _copy_slices(source: Path, start: int, length: int, out: BinaryIO) -> None:
    with open(source, "rb") as data:
        data.seek(start)
        left = length
        while left:
            chunk = data.read(min(left, COPY_SLICE))
            if not chunk:
                raise ExportError(f"{source.name}: ends before the {length} bytes of a tensor at {start}")
            out.write(chunk)
            left -= len(chunk)


def _external_location(tensor: onnx.TensorProto, base_dir: Path) -> tuple[Path, int, int]:
    """Where an external tensor's bytes are: (file, offset, length); refused outside ``base_dir``."""
    info = ExternalDataInfo(tensor)
    location = Path(info.location)
    if location.is_absolute() or ".." in location.parts:
        raise ExportError(f"initializer {tensor.name}: external data outside its folder ({info.location})")
    source = base_dir / location
    offset = int(info.offset or 0)
    length = int(info.length) if info.length is not None else source.stat().st_size - offset
    return source, offset, length


def write_with_external_data(
    model: onnx.ModelProto, tensors: Iterable[tuple[onnx.TensorProto, Any]], path: Path
) -> None:
    """Append initializers to ``model`` and write it as ``path`` + ``path.data``, one tensor in memory at a time.

    ``tensors``: (TensorProto carrying name, dims and data_type but no data, buffer of its raw little-endian bytes)
    pairs, e.g. ``ndarray.data``; a generator lets each buffer be freed once written.
    """
    if sys.byteorder != "little":
        raise ExportError("writing ONNX tensors needs a little-endian machine")
    with open(external_data_file(path), "wb") as out:
        data = _DataFile(out, external_data_file(path).name)
        for tensor, buffer in tensors:
            raw = memoryview(buffer).cast("B")
            if raw.nbytes < EXTERNAL_MIN_BYTES:
                tensor.raw_data = raw.tobytes()
            else:
                data.append(tensor, raw)
            model.graph.initializer.append(tensor)
            del raw, buffer
    onnx.save_model(model, str(path))


def save_with_external_data(model: onnx.ModelProto, path: Path, base_dir: Path) -> None:
    """Write ``model`` as ``path`` + ``path.data``: initializers already in external files (read from ``base_dir``)
    are copied a slice at a time, in-memory ones of EXTERNAL_MIN_BYTES or more moved out one by one. ``model``'s
    initializers are changed to point at the new data file (as ``onnx.save_model`` with external data does)."""
    name = external_data_file(path).name
    partial = path.parent / f".{name}.partial"
    with open(partial, "wb") as out:
        data = _DataFile(out, name)
        for tensor in model.graph.initializer:
            if uses_external_data(tensor):
                data.copy(tensor, *_external_location(tensor, base_dir))
            elif tensor.HasField("raw_data"):
                raw = tensor.raw_data
                if len(raw) >= EXTERNAL_MIN_BYTES:
                    data.append(tensor, raw)
                del raw
    partial.replace(external_data_file(path))
    onnx.save_model(model, str(path))


def _copy_field(target: Any, name: str, value: Any) -> None:
    field = getattr(target, name)
    if hasattr(field, "extend"):  # repeated
        field.extend(value)
    elif hasattr(field, "CopyFrom"):  # message
        field.CopyFrom(value)
    else:
        setattr(target, name, value)


def _split(message: Any, around: str) -> tuple[bytes, bytes]:
    """``message`` serialised without its field ``around``, cut where that field's records belong.

    Protobuf serialises known fields in field-number order, so ``before + records of around + after`` is
    byte for byte what ``SerializeToString`` gives for the whole message.
    """
    number = message.DESCRIPTOR.fields_by_name[around].number
    before, after = type(message)(), type(message)()
    for descriptor, value in message.ListFields():
        if descriptor.name != around:
            _copy_field(before if descriptor.number < number else after, descriptor.name, value)
    return before.SerializeToString(), after.SerializeToString()


def _tag(number: int) -> bytes:
    return _varint(number << 3 | _LENGTH_DELIMITED)


@dataclass(frozen=True)
class _Initializer:
    """One initializer as it is written: in memory (``proto``), or its proto's bytes around raw bytes in a file."""

    proto: onnx.TensorProto | None = None
    before: bytes = b""
    after: bytes = b""
    source: Path | None = None
    offset: int = 0
    length: int = 0

    @classmethod
    def of(cls, tensor: onnx.TensorProto, base_dir: Path) -> _Initializer:
        if not uses_external_data(tensor):
            return cls(proto=tensor)
        source, offset, length = _external_location(tensor, base_dir)
        meta = onnx.TensorProto()
        for descriptor, value in tensor.ListFields():
            if descriptor.name not in ("external_data", "data_location"):
                _copy_field(meta, descriptor.name, value)
        before, after = _split(meta, "raw_data")
        return cls(before=before + _tag(RAW_DATA_FIELD) + _varint(length), after=after, source=source,
                   offset=offset, length=length)  # fmt: skip

    def size(self) -> int:
        """The bytes of the serialised TensorProto."""
        if self.proto is not None:
            return int(self.proto.ByteSize())
        return len(self.before) + self.length + len(self.after)

    def write(self, out: BinaryIO) -> None:
        if self.proto is not None:
            out.write(self.proto.SerializeToString())
            return
        assert self.source is not None
        out.write(self.before)
        _copy_slices(self.source, self.offset, self.length, out)
        out.write(self.after)


def save_single_file(model: onnx.ModelProto, path: Path, base_dir: Path | None = None) -> None:
    """Write ``model`` as one self-contained file, byte for byte what ``onnx.save_model`` writes for it with every
    weight loaded; external initializers are read from ``base_dir`` (default: the target's folder) a slice at a
    time, in-memory ones serialised one by one."""
    initializers = [_Initializer.of(tensor, base_dir or path.parent) for tensor in model.graph.initializer]
    model_before, model_after = _split(model, "graph")
    graph_before, graph_after = _split(model.graph, "initializer")
    sizes = [initializer.size() for initializer in initializers]
    records = sum(len(_tag(INITIALIZER_FIELD)) + len(_varint(size)) + size for size in sizes)
    graph_size = len(graph_before) + records + len(graph_after)
    graph_head = _tag(GRAPH_FIELD) + _varint(graph_size)
    if len(model_before) + len(graph_head) + graph_size + len(model_after) > MAX_SINGLE_FILE_BYTES:
        raise ExportError(f"{path.name}: the graph is over 2 GiB and cannot be stored as one file")
    try:
        with open(path, "wb") as out:
            out.write(model_before + graph_head + graph_before)
            for initializer, size in zip(initializers, sizes, strict=True):
                out.write(_tag(INITIALIZER_FIELD) + _varint(size))
                initializer.write(out)
            out.write(graph_after + model_after)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
