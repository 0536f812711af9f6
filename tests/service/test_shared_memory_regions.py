"""The shared memory regions themselves (``service.oip.shared_memory``), over files in a folder standing in for
/dev/shm: what a hostile or careless client could make the server read, write or crash on is refused."""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest

from service.errors import BadRequest, PayloadTooLarge, RegionNotFound
from service.oip.shared_memory import (
    MAX_REGIONS,
    Placement,
    SharedMemoryRegions,
    output_placements,
    placement_of,
)


@pytest.fixture
def regions(tmp_path: Path) -> SharedMemoryRegions:
    (tmp_path / "data").write_bytes(bytes(range(256)) * 4)
    made = SharedMemoryRegions(True, max_read_bytes=100, folder=tmp_path)
    yield made
    made.close()


def open_on(folder: Path) -> int:
    """Descriptors of this process open on the regions' object (``folder``/data): other tests' sockets and files,
    closed by a garbage collection meanwhile, do not count."""
    target, count = str(folder / "data"), 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            count += os.readlink(f"/proc/self/fd/{fd}") == target
    return count


def test_reads_and_writes_go_to_the_region_at_its_offset(regions: SharedMemoryRegions, tmp_path: Path) -> None:
    regions.register("r", "/data", 512, 256)
    assert regions.read(Placement("r", 10, 4), "text") == bytes([10, 11, 12, 13])
    regions.write(Placement("r", 100, 8), b"abc", "label")
    assert (tmp_path / "data").read_bytes()[612:615] == b"abc"  # 512 + 100: the object itself changed
    with pytest.raises(PayloadTooLarge, match="more than a request may hold"):
        regions.read(Placement("r", 0, 101), "text")
    with pytest.raises(BadRequest, match="go past its end"):
        regions.read(Placement("r", 250, 10), "text")
    with pytest.raises(BadRequest, match="needs 9 bytes"):
        regions.write(Placement("r", 0, 8), b"123456789", "label")


def test_a_key_is_a_regular_file_in_the_folder_and_nothing_else(regions: SharedMemoryRegions, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"secret" * 100)
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "folder").mkdir()
    for key in ("/link", "/folder", "/missing"):
        with pytest.raises(BadRequest, match="unable to open"):
            regions.register("r", key, 0, 8)
    for key in ("/../data", "/", "/a/b", "", "..", "/" + "x" * 256):
        with pytest.raises(BadRequest, match="no shared memory object's name"):
            regions.register("r", key, 0, 8)
    assert regions.status() == []
    regions.register("r", "data", 0, 8)  # shm_open takes the name with or without its leading '/'
    assert regions.status() == [{"name": "r", "key": "data", "offset": 0, "byte_size": 8}]


def test_a_shrunk_object_is_refused_not_read(regions: SharedMemoryRegions, tmp_path: Path) -> None:
    regions.register("r", "/data", 0, 1024)
    os.truncate(tmp_path / "data", 100)  # reading past it through the mapping would be SIGBUS
    with pytest.raises(BadRequest, match="shrank to 100 bytes"):
        regions.read(Placement("r", 0, 8), "text")
    with pytest.raises(BadRequest, match="shrank to 100 bytes"):
        regions.write(Placement("r", 0, 8), b"x", "label")


def test_unregistered_regions_are_closed_and_not_found(regions: SharedMemoryRegions, tmp_path: Path) -> None:
    regions.register("a", "/data", 0, 8)
    regions.register("b", "/data", 8, 8)
    opened = open_on(tmp_path)
    regions.unregister("a")
    assert open_on(tmp_path) == opened - 1
    with pytest.raises(RegionNotFound):
        regions.read(Placement("a", 0, 1), "text")
    regions.unregister()
    assert regions.status() == []
    assert open_on(tmp_path) == opened - 2


def test_an_output_region_unregistered_in_flight_stays_mapped_until_its_request_ends(
    regions: SharedMemoryRegions, tmp_path: Path
) -> None:
    regions.register("r", "/data", 0, 64)
    placed = output_placements({"label": {"shared_memory_region": "r", "shared_memory_byte_size": 8}}, regions)
    opened = open_on(tmp_path)
    regions.unregister("r")  # while the request that writes "label" there runs
    assert regions.status() == [] and open_on(tmp_path) == opened  # gone by name, still mapped
    regions.register("r", "/data", 32, 32)  # the name is free again at once
    regions.write(placed["label"], b"late", "label")  # the running request still writes where it was told
    assert (tmp_path / "data").read_bytes()[:4] == b"late"
    del placed
    gc.collect()
    assert open_on(tmp_path) == opened  # the old mapping closed, the new one open
    unheld = output_placements({"label": {"shared_memory_region": "r", "shared_memory_byte_size": 8}}, regions)
    del unheld
    gc.collect()
    regions.unregister("r")  # no request holds it: unmapped at once
    assert open_on(tmp_path) == opened - 1


def test_registered_regions_are_capped(regions: SharedMemoryRegions, tmp_path: Path) -> None:
    opened = open_on(tmp_path)
    for index in range(MAX_REGIONS):
        regions.register(f"r{index}", "/data", index, 1)
    with pytest.raises(BadRequest, match="the most there may be"):
        regions.register("one-more", "/data", 0, 1)
    assert open_on(tmp_path) == opened + MAX_REGIONS  # one descriptor a region, none leaked
    regions.unregister("r0")
    regions.register("one-more", "/data", 0, 1)


def test_off_refuses_everything_but_closing(tmp_path: Path) -> None:
    (tmp_path / "data").write_bytes(b"x" * 8)
    off = SharedMemoryRegions(False, max_read_bytes=100, folder=tmp_path)
    for call in (off.status, lambda: off.register("r", "/data", 0, 8), off.unregister,
                 lambda: off.read(Placement("r", 0, 1), "text")):  # fmt: skip
        with pytest.raises(BadRequest, match="--allow-client-shm"):
            call()
    off.close()


@pytest.mark.parametrize(
    ("parameters", "why"),
    [
        ({"shared_memory_byte_size": 4}, "shared_memory_byte_size needs shared_memory_region"),
        ({"shared_memory_region": "r"}, "needs shared_memory_byte_size"),
        ({"shared_memory_region": 3, "shared_memory_byte_size": 4}, "a registered region's name"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": True}, "must be a byte count"),
        ({"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": -1}, "must be a byte"),
    ],
)
def test_placement_parameters_are_checked(parameters: dict[str, object], why: str) -> None:
    with pytest.raises(BadRequest, match=why):
        placement_of(parameters, "text")
    assert placement_of({"binary_data_size": 4}, "text") is None
