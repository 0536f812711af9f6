"""Triton's system shared memory extension: a client on the same host puts input tensors in a POSIX shared memory
object, and has outputs written there, instead of sending them in the request and the answer.

The client registers a region (a name, the object's key, an offset and a size in it); a tensor of an infer request
then names a region, an offset in it and a byte size (the parameters ``shared_memory_region``,
``shared_memory_offset``, ``shared_memory_byte_size``: ``Placement``). The bytes are those of the binary tensor data
extension (a BYTES element: a 4-byte little-endian length, then its UTF-8 text).

Off unless the server starts with ``allow_client_shm`` (Triton's ``--allow-client-shm``, also off by default): a
client that may register regions may have the server read and write any shared memory object the server's user can
open. A key names an object in ``/dev/shm`` itself (no folder, no link, a regular file). The object stays open while
its region is registered, and after that while a request that writes an output there runs (as Triton), and its
size is checked again at each use: one a client shrank would otherwise kill the
server on the next read (SIGBUS). CUDA shared memory is not served (models read their inputs from system memory).
No FastAPI, no gRPC: both transports call this.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.errors import BadRequest, Conflict, PayloadTooLarge, RegionNotFound

if TYPE_CHECKING:
    from service.oip.codec import OutputTensor

REGION, OFFSET, BYTE_SIZE = "shared_memory_region", "shared_memory_offset", "shared_memory_byte_size"
PARAMETERS = frozenset({REGION, OFFSET, BYTE_SIZE})
SHM_FOLDER = Path("/dev/shm")
KEY_MAX = 255  # NAME_MAX: the longest file name in /dev/shm
MAX_REGIONS = 128  # each holds a descriptor: without a cap, registering could take every one the server has
DISABLED = (
    "client shared memory is off: start the server with --allow-client-shm (env BERTSERVE_ALLOW_CLIENT_SHM=true) "
    "to register regions"
)
NO_CUDA = "CUDA shared memory is not supported: this server reads inputs from and writes outputs to system memory"


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Placement:
    """Where one tensor's bytes lie: ``byte_size`` bytes from ``offset`` in the registered region ``region``."""

    region: str
    offset: int
    byte_size: int
    held: Region | None = field(default=None, compare=False)  # an output's region, held until its request ends


def placement_of(parameters: Mapping[str, Any], tensor: str) -> Placement | None:
    """A tensor's shared memory parameters as its Placement; None when it names no region. BadRequest for an offset
    or a size without a region, a region without a size, or a value that is no byte count."""
    region = parameters.get(REGION)
    if region is None:
        alone = sorted(PARAMETERS.intersection(parameters))
        if alone:
            raise BadRequest(f"tensor {tensor!r}: {alone[0]} needs {REGION}")
        return None
    if not isinstance(region, str) or not region:
        raise BadRequest(f"tensor {tensor!r}: {REGION} is a registered region's name")
    if BYTE_SIZE not in parameters:
        raise BadRequest(f"tensor {tensor!r}: {REGION} needs {BYTE_SIZE}")
    offset, byte_size = parameters.get(OFFSET, 0), parameters[BYTE_SIZE]
    for name, value in ((OFFSET, offset), (BYTE_SIZE, byte_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadRequest(f"tensor {tensor!r}: {name} must be a byte count, 0 or more, not {value!r}")
    return Placement(region, offset, byte_size)


@dataclass(eq=False, slots=True)
class Region:
    name: str
    key: str
    offset: int  # in the shared memory object
    byte_size: int
    mapped: mmap.mmap  # the object's first offset + byte_size bytes; it holds the object open (its size: size())
    holders: int = 0  # requests whose outputs go here, from their start to their end
    unregistered: bool = False  # unmapped once the last holder ends (Triton waits for in-flight requests too)

    def status(self) -> dict[str, Any]:
        """As Triton's status answer lists a region."""
        return {"name": self.name, "key": self.key, "offset": self.offset, "byte_size": self.byte_size}

    def span(self, where: Placement) -> slice:
        """The bytes of the mapping ``where`` names; BadRequest when they are not all inside the region, or the
        object no longer holds the region (shrunk since it was registered)."""
        if where.offset + where.byte_size > self.byte_size:
            raise BadRequest(
                f"shared memory region {self.name!r} holds {self.byte_size} bytes: offset {where.offset} and "
                f"byte size {where.byte_size} go past its end"
            )
        held = self.mapped.size()
        if held < self.offset + self.byte_size:
            raise BadRequest(f"shared memory object {self.key!r} shrank to {held} bytes since region "
                             f"{self.name!r} was registered: register it again")  # fmt: skip
        start = self.offset + where.offset
        return slice(start, start + where.byte_size)


class SharedMemoryRegions:
    """The registered system shared memory regions by name; every method raises BadRequest while ``allowed`` is
    off. Thread-safe: the HTTP entry, the gRPC server and shutdown may call it from any thread."""

    def __init__(self, allowed: bool, max_read_bytes: int, folder: Path = SHM_FOLDER) -> None:
        self.allowed = allowed
        self.max_read_bytes = max_read_bytes  # what a request body may hold: an input read is held to it too
        self.folder = folder
        self._regions: dict[str, Region] = {}
        self._lock = threading.RLock()  # reentrant: a held Placement may be collected, and released, inside it

    def _check_allowed(self) -> None:
        if not self.allowed:
            raise BadRequest(DISABLED)

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """Every region's status, or the named one's (RegionNotFound when it is not registered)."""
        self._check_allowed()
        with self._lock:
            if not name:
                return [self._regions[key].status() for key in sorted(self._regions)]
            return [self._find(name).status()]

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes from ``offset`` of the shared memory object ``key`` as region ``name``."""
        self._check_allowed()  # offset and byte_size are whole numbers from 0: REST's schema and gRPC's uint64 say so
        if byte_size == 0:
            raise BadRequest(f"region {name!r}: byte_size must be at least 1")
        path = self._object_path(key)
        with self._lock:
            if name in self._regions:
                raise Conflict(f"shared memory region {name!r} is registered already: unregister it first")
            if len(self._regions) >= MAX_REGIONS:
                raise BadRequest(f"{MAX_REGIONS} shared memory regions are registered, the most there may be: "
                                 "unregister one first")  # fmt: skip
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError as exc:
                raise BadRequest(f"unable to open shared memory object {key!r}: {exc.strerror}") from None
            try:
                held = os.fstat(fd)
                if not stat.S_ISREG(held.st_mode):
                    raise BadRequest(f"{key!r} is not a shared memory object")
                if offset + byte_size > held.st_size:
                    raise BadRequest(f"shared memory object {key!r} holds {held.st_size} bytes: offset {offset} "
                                     f"and byte_size {byte_size} go past its end")  # fmt: skip
                mapped = mmap.mmap(fd, offset + byte_size)
            finally:
                os.close(fd)  # the mapping keeps its own descriptor
            self._regions[name] = Region(name, key, offset, byte_size, mapped)

    def unregister(self, name: str = "") -> None:
        """Unregister the named region (one not registered: nothing to do, as Triton), or every region: its name is
        free at once; it is unmapped once no request that writes an output there runs."""
        self._check_allowed()
        with self._lock:
            for key in [name] if name else list(self._regions):
                region = self._regions.pop(key, None)
                if region is None:
                    continue
                region.unregistered = True
                if not region.holders:
                    region.mapped.close()

    def close(self) -> None:
        """Unmap every region (at shutdown, whatever ``allowed``)."""
        with self._lock:
            for region in self._regions.values():
                region.mapped.close()
            self._regions.clear()

    def read(self, where: Placement, tensor: str) -> bytes:
        """An input tensor's bytes; PayloadTooLarge past ``max_read_bytes``."""
        self._check_allowed()
        if where.byte_size > self.max_read_bytes:
            raise PayloadTooLarge(f"input {tensor!r}: {where.byte_size} bytes in shared memory, more than a "
                                  f"request may hold ({self.max_read_bytes} bytes, max_body_bytes)")  # fmt: skip
        with self._lock:
            region = self._find(where.region)
            return region.mapped[region.span(where)]

    def hold(self, where: Placement) -> Placement:
        """``where``, checked for an output before its request runs, with its region held until the Placement
        returned is dropped (the request's end, however it ends): unregistering the region meanwhile waits."""
        self._check_allowed()
        with self._lock:
            region = self._find(where.region)
            region.span(where)
            region.holders += 1
        held = replace(where, held=region)
        weakref.finalize(held, self._release, region).atexit = False
        return held

    def _release(self, region: Region) -> None:
        with self._lock:
            region.holders -= 1
            if region.unregistered and not region.holders:
                region.mapped.close()

    def write(self, where: Placement, data: bytes, tensor: str) -> None:
        """Write an output tensor's bytes from the placement's offset; BadRequest when they do not fit."""
        if len(data) > where.byte_size:
            raise BadRequest(f"output {tensor!r} needs {len(data)} bytes; its shared memory "
                             f"({where.byte_size} bytes) is too small")  # fmt: skip
        with self._lock:
            region = where.held if where.held is not None else self._find(where.region)
            span = region.span(where)
            region.mapped[span.start : span.start + len(data)] = data

    def _find(self, name: str) -> Region:
        region = self._regions.get(name)
        if region is None:
            raise RegionNotFound(f"unable to find system shared memory region {name!r}")
        return region

    def _object_path(self, key: str) -> Path:
        """The file in ``folder`` of a POSIX shared memory key (``/name``, as shm_open takes it)."""
        if not isinstance(key, str):
            raise BadRequest("key is the name of a shared memory object, such as '/input_data'")
        name = key.removeprefix("/")
        if not name or len(name) > KEY_MAX or "/" in name or "\x00" in name or name in (".", ".."):
            raise BadRequest(f"key {key!r} is no shared memory object's name: '/name', with no other '/'")
        return self.folder / name


def output_placements(
    parameters: Mapping[str, Mapping[str, Any]], regions: SharedMemoryRegions
) -> dict[str, Placement]:
    """Where each requested output that names a region goes, by name, checked before the request runs. An output in
    shared memory is neither classified nor binary data (Triton's rule)."""
    placements = {}
    for name, given in parameters.items():
        where = placement_of(given, name)
        if where is None:
            continue
        for other in ("classification", "binary_data"):
            if given.get(other):
                raise BadRequest(f"output {name!r}: {REGION} and {other} cannot go together")
        placements[name] = regions.hold(where)
    return placements


def place_outputs(
    outputs: Sequence[OutputTensor], placements: Mapping[str, Placement], regions: SharedMemoryRegions
) -> set[str]:
    """Write the outputs that have a placement into their regions; their names. The answer lists them with no data
    and no parameters, as Triton's does (perf_analyzer's HTTP client reads an output's parameters as binary data)."""
    for output in outputs:
        where = placements.get(output.name)
        if where is not None:
            regions.write(where, output.binary_data(), output.name)
    return set(placements).intersection(output.name for output in outputs)


def cuda_status(name: str = "") -> list[dict[str, Any]]:
    """Triton's CUDA shared memory status: none is ever registered here (``NO_CUDA``)."""
    if name:
        raise RegionNotFound(f"unable to find CUDA shared memory region {name!r}: {NO_CUDA}")
    return []
