"""Where the models run: ``--device cpu | cuda[:N] | auto`` resolved once, before any model loads.

``cuda`` stops start-up with one line naming what is missing (no CUDA execution provider in this onnxruntime, no
CUDA runtime library, no such GPU) instead of running on the CPU behind the user's back; ``auto`` takes GPU 0 when
all of that is there and the CPU otherwise, and says which in the log. The CUDA libraries are found the way ONNX
Runtime's own ``preload_dlls`` finds them (the nvidia-* wheels that ``onnxruntime-gpu[cuda,cudnn]`` installs), and
the CUDA runtime itself answers how many GPUs there are and how much of their memory is free.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import re
from dataclasses import dataclass
from typing import Any

import onnxruntime as ort

logger = logging.getLogger(__name__)

CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
DEVICE_PATTERN = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")
CUDART_NAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")


class DeviceUnavailable(Exception):
    """The device asked for cannot run models here; the message is the one line start-up prints."""


@dataclass(frozen=True, slots=True)
class Device:
    kind: str  # "cpu" or "cuda"
    index: int = 0

    @property
    def name(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def providers(self) -> list[str | tuple[str, dict[str, Any]]]:
        """The session's execution providers: the CUDA one first (with the CPU for what it lacks), or the CPU."""
        if not self.is_cuda:
            return [CPU_PROVIDER]
        # the default arena (regions that double) on purpose: kSameAsRequested allocates afresh for every new batch
        # shape, and served batches come in ever new shapes (a 10x loss at c=32 on an H200, benchmarks/results/gpu.md)
        return [(CUDA_PROVIDER, {"device_id": str(self.index)}), CPU_PROVIDER]


CPU = Device("cpu")


def parse_device(spec: str) -> tuple[str, int]:
    """``cpu`` / ``auto`` / ``cuda`` / ``cuda:N`` -> (kind, index); ValueError for anything else."""
    spec = spec.strip().lower()
    if not DEVICE_PATTERN.match(spec):
        raise ValueError(f"device {spec!r} is not cpu, cuda, cuda:N or auto")
    kind, _, index = spec.partition(":")
    return kind, int(index or 0)


@functools.cache
def _cudart() -> ctypes.CDLL | None:
    """The CUDA runtime library, after ONNX Runtime has preloaded the CUDA wheels' libraries (None: not found)."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        try:
            preload(cuda=True, cudnn=True, msvc=False)
        except OSError as exc:
            logger.debug("onnxruntime.preload_dlls: %s", exc)
    for name in CUDART_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def cuda_device_count() -> int:
    """GPUs the CUDA runtime sees; DeviceUnavailable when there is no runtime or no driver to ask."""
    cudart = _cudart()
    if cudart is None:
        raise DeviceUnavailable(
            f"the CUDA runtime library ({' / '.join(CUDART_NAMES[:2])}) is not installed: "
            "pip install 'onnxruntime-gpu[cuda,cudnn]' brings it"
        )
    count = ctypes.c_int(0)
    status = cudart.cudaGetDeviceCount(ctypes.byref(count))
    if status != 0:
        raise DeviceUnavailable(f"no usable NVIDIA GPU: cudaGetDeviceCount failed with CUDA error {status} "
                                "(no GPU visible to this container, or no driver)")  # fmt: skip
    return count.value


def cuda_free_memory(index: int) -> tuple[int, int] | None:
    """(free, total) bytes of GPU ``index`` as the CUDA runtime reports them now; None when it cannot say."""
    cudart = _cudart()
    if cudart is None or cudart.cudaSetDevice(ctypes.c_int(index)) != 0:
        return None
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    if cudart.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) != 0:
        return None
    return free.value, total.value


def resolve_device(spec: str) -> Device:
    """The device to serve on, checked: DeviceUnavailable (one line) when ``cuda[:N]`` cannot be had."""
    kind, index = parse_device(spec)
    if kind == "cpu":
        return CPU
    providers = ort.get_available_providers()
    try:
        if CUDA_PROVIDER not in providers:
            raise DeviceUnavailable(
                f"this onnxruntime {ort.__version__} has no CUDA execution provider (it has {', '.join(providers)}): "
                "install onnxruntime-gpu in its place"
            )
        count = cuda_device_count()
        if index >= count:
            seen = f"GPUs 0..{count - 1}" if count else "no GPU"
            raise DeviceUnavailable(f"there is no cuda:{index}: the CUDA runtime sees {seen}")
    except DeviceUnavailable as exc:
        if kind == "auto":
            logger.warning("--device auto: serving on the CPU, since %s", exc)
            return CPU
        raise DeviceUnavailable(f"--device {spec}: {exc}") from None
    device = Device("cuda", index)
    memory = cuda_free_memory(index)
    shown = f"{memory[0] / 2**30:.1f} of {memory[1] / 2**30:.1f} GiB free" if memory else "memory unknown"
    logger.info("serving on %s (onnxruntime %s, %s)", device.name, ort.__version__, shown)
    return device


def check_session_device(session: ort.InferenceSession, device: Device) -> None:
    """ONNX Runtime drops to the CPU when the CUDA provider cannot start (a missing cuDNN, say) and only logs it:
    a CUDA session whose first provider is not CUDA is refused here instead."""
    if device.is_cuda and session.get_providers()[0] != CUDA_PROVIDER:
        raise DeviceUnavailable(
            f"the CUDA execution provider did not start on {device.name} (onnxruntime fell back to "
            f"{', '.join(session.get_providers())}): are CUDA 13 and cuDNN 9 installed? "
            "pip install 'onnxruntime-gpu[cuda,cudnn]'"
        )
