"""Sample a server under load with py-spy and summarise where its threads spend their time."""

from __future__ import annotations

import collections
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
TOP_FRAMES = 20


def py_spy_path() -> str | None:
    """py-spy on PATH, else the venv's own when the venv is not activated (``.venv/bin/python -m benchmarks.run``)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


def start_py_spy(pid: int, duration_s: float, out: Path) -> subprocess.Popen[bytes] | None:
    """Record raw (collapsed) stacks of every thread of ``pid``, idle threads left out."""
    py_spy = py_spy_path()
    if py_spy is None:
        log.warning("py-spy is not installed (pip install py-spy): no profile")
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(duration_s))), "--format", "raw",
               "--output", str(out), "--rate", "50", "--nonblocking", "--threads"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish_py_spy(process: subprocess.Popen[bytes] | None, out: Path) -> dict[str, Any] | None:
    if process is None:
        return None
    _, stderr = process.communicate(timeout=120)
    if process.returncode != 0 or not out.exists():
        log.warning("py-spy failed (%s): %s", process.returncode, stderr.decode(errors="replace")[-500:])
        return None
    return summarise(out.read_text())


def summarise(collapsed: str) -> dict[str, Any]:
    """Leaf-frame and inclusive shares from py-spy's raw output (``frame;frame;...;leaf count`` per line)."""
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        leaf[frames[-1]] += count
        threads[frames[0]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not total:
        return {"samples": 0, "top_leaf_frames": [], "top_inclusive_frames": [], "threads": []}

    def top(counter: collections.Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": frame, "share": 100 * count / total} for frame, count in counter.most_common(TOP_FRAMES)]

    return {"samples": total, "top_leaf_frames": top(leaf), "top_inclusive_frames": top(inclusive),
            "threads": top(threads)}  # fmt: skip
