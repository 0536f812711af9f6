"""Where the accuracy recipes' training runs go, and what each run records of the machine it ran on.

Shared by ``benchmarks.accuracy`` and the encoders its pre-training rows start from (``benchmarks.pretraining``),
so that neither imports the other for them.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from benchmarks.datasets import REPO_ROOT

RUNS = REPO_ROOT / "runs" / "accuracy"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def device_name() -> str:
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        lines = cpuinfo.read_text().splitlines()
        names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
        model = names[0] if names else model
    return f"CPU: {model}, {os.cpu_count()} cores"
