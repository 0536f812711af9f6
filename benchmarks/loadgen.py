"""The load generator: wrk with a Lua script that rotates through real request bodies."""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
LUA_SCRIPT = Path(__file__).with_name("rotate_bodies.lua")
MARKER = "BENCH_JSON "


@dataclass
class LoadResult:
    concurrency: int
    duration_s: float
    requests: int
    sequences: int
    errors: int
    error_detail: dict[str, int]
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    client_cpu_s: float = 0.0  # wrk's own CPU time (user + system): it shares the machine's cores with the server

    @property
    def sequences_per_s(self) -> float:
        return self.sequences / self.duration_s if self.duration_s else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["sequences_per_s"] = round(self.sequences_per_s, 2)
        return data


def require_wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise RuntimeError("wrk is not installed: apt-get install wrk")
    return path


def write_bodies(bodies: list[dict[str, Any]], path: Path) -> Path:
    """One compact JSON body per line, the format rotate_bodies.lua reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(body, separators=(",", ":")) + "\n" for body in bodies), encoding="utf-8")
    return path


def parse_wrk_output(output: str, concurrency: int, sequences_per_request: int = 1) -> LoadResult:
    for line in output.splitlines():
        if line.startswith(MARKER):
            data = json.loads(line[len(MARKER) :])
            break
    else:
        raise RuntimeError(f"wrk printed no summary line:\n{output[-2000:]}")
    errors = data["errors"]
    # wrk counts non-2xx answers in "requests" too; only answered 2xx requests carry sequences
    good = max(0, data["requests"] - errors["status"])
    latency = data["latency_us"]
    return LoadResult(
        concurrency=concurrency,
        duration_s=data["duration_us"] / 1e6,
        requests=data["requests"],
        sequences=good * sequences_per_request,
        errors=sum(errors.values()),
        error_detail=errors,
        p50_ms=latency["p50"] / 1000,
        p90_ms=latency["p90"] / 1000,
        p99_ms=latency["p99"] / 1000,
        mean_ms=latency["mean"] / 1000,
        max_ms=latency["max"] / 1000,
    )


def run_wrk(
    url: str,
    bodies_file: Path,
    concurrency: int,
    duration_s: float,
    timeout_s: float = 60.0,
    threads: int = 1,
    sequences_per_request: int = 1,
) -> LoadResult:
    """Run wrk for ``duration_s`` with ``concurrency`` open connections, each with one request in flight."""
    command = [
        require_wrk(),
        f"-t{min(threads, concurrency)}",
        f"-c{concurrency}",
        f"-d{max(1, round(duration_s))}s",
        f"--timeout={max(1, round(timeout_s))}s",
        "-s",
        str(LUA_SCRIPT),
        url,
    ]
    env = dict(os.environ, BENCH_BODIES=str(bodies_file))
    log.debug("running %s", " ".join(command))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # children reaped meanwhile: wrk alone
    completed = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=duration_s + timeout_s + 30, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(f"wrk failed ({completed.returncode}): {completed.stderr[-2000:]}")
    result = parse_wrk_output(completed.stdout, concurrency, sequences_per_request)
    result.client_cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result
