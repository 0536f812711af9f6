"""benchmarks: both raw ORT bounds in ratios, limits and targets; server CPU read from /proc over a process session."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest

from benchmarks import report
from benchmarks.servers import session_cpu_seconds


def results_with(raw: list[dict[str, Any]], bertserve_fp32: float) -> dict[str, Any]:
    row = {"task": "sst2", "system": "bertserve-fp32", "concurrency": 32, "sequences_per_s": bertserve_fp32}
    return {"raw": raw, "throughput": [row], "settings": {"concurrency": [32]}}


def raw_row(method: str | None, speed: float) -> dict[str, Any]:
    row = {"task": "sst2", "variant": "fp32", "sequences_per_s": speed}
    return row if method is None else {**row, "method": method}


def test_ratios_to_both_bounds_and_the_target_counts_the_higher_one() -> None:
    results = results_with([raw_row(None, 300.0), raw_row("global-sorted", 320.0)], bertserve_fp32=240.0)
    results["ratios"] = report.compute_ratios(results)
    (entry,) = results["ratios"]
    assert entry["bertserve_fp32/raw_fp32"] == 0.8
    assert entry["bertserve_fp32/raw_global_fp32"] == 0.75
    (limit,) = report.compare_limits(results)
    assert limit["higher"] == "global-sorted"
    assert limit["chunk-sorted"] == 300.0
    (verdict,) = [v for v in report.check_targets(results) if "raw ORT (fp32" in v["target"]]
    assert verdict["worst"] == 0.75
    assert not verdict["met"]


def test_results_of_one_bound_only_still_render() -> None:
    results = results_with([raw_row(None, 300.0)], bertserve_fp32=280.0)
    results["ratios"] = report.compute_ratios(results)
    (limit,) = report.compare_limits(results)
    assert limit["higher"] is None
    (verdict,) = [v for v in report.check_targets(results) if "raw ORT (fp32" in v["target"]]
    assert verdict["worst"] == 0.93


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_session_cpu_counts_the_leader_and_its_reaped_children() -> None:
    busy_child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(30_000_000))'])"
    process = subprocess.Popen([sys.executable, "-c", busy_child + "; import time; time.sleep(2)"],
                               start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and session_cpu_seconds(process.pid) < 0.3:
            time.sleep(0.1)
        assert session_cpu_seconds(process.pid) >= 0.3
    finally:
        process.kill()
        process.wait()
