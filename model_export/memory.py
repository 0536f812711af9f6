"""The export's own memory: its peak resident set, and handing freed memory back to the system between steps.

The peak is the kernel's high-water mark of this process's resident set (``ru_maxrss``, the figure
``/usr/bin/time -v`` and ``os.wait4`` report as "maximum resident set size"). The export runs in one process (no
child does any of its work), so this is the whole export's peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

MB = 1_000_000  # decimal, as file sizes are quoted


def peak_rss_bytes() -> int:
    """This process's largest resident set so far, in bytes (ru_maxrss: KiB on Linux, bytes on macOS; 0 where
    there is no getrusage)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def current_rss_bytes() -> int | None:
    """The resident set now (VmRSS), or None where /proc is not there."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None on other C libraries."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_memory() -> None:
    """Collect garbage and return the C heap's free pages to the system (glibc malloc_trim), so that what one step
    freed is not counted again on top of what the next step allocates."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_frozen_lock = threading.Lock()
_frozen_depth = 0
_froze_here = False  # whether the outermost entry froze the heap (not when the process had frozen it already)


@contextmanager
def collecting_new_objects_only() -> Iterator[None]:
    """Within it, ``release_memory``'s collections scan only the objects made since it was entered.

    Entering moves every object the process already has (imported modules, torch, onnx, a test run's fixtures:
    millions of objects) to the collector's permanent generation (``gc.freeze``); leaving moves them back
    (``gc.unfreeze``), so a cycle among them is collected later as before. What an export step frees was made
    inside it, so each collection still finds it, in milliseconds instead of the 0.2-0.5 s a scan of the whole heap
    took (four fifths of a tiny model's export). Nested uses freeze once and unfreeze at the outermost exit; a
    process that froze objects itself keeps its own choice (nothing is frozen or unfrozen here)."""
    global _frozen_depth, _froze_here
    with _frozen_lock:
        if _frozen_depth == 0:
            _froze_here = gc.get_freeze_count() == 0
            if _froze_here:
                gc.freeze()
        _frozen_depth += 1
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_depth -= 1
            if _frozen_depth == 0 and _froze_here:
                gc.unfreeze()


def _megabytes(size: int) -> str:
    return f"{size / MB:,.0f}" if size >= 10 * MB else f"{size / MB:.2f}"


def describe_peak(weights_bytes: int) -> str:
    """'peak RSS 1,234 MB (2.8x the 438 MB of fp32 weights)'."""
    peak = peak_rss_bytes()
    line = f"peak RSS {_megabytes(peak)} MB"
    if weights_bytes:
        line += f" ({peak / weights_bytes:.1f}x the {_megabytes(weights_bytes)} MB of fp32 weights)"
    return line
