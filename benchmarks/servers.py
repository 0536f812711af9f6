"""Start and stop the servers under test: bertserve, the naive pipeline app and infinity-emb."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.datasets import REPO_ROOT

log = logging.getLogger(__name__)
OFFLINE_ENV = {"ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
PROC = Path("/proc")


@dataclass
class Server:
    name: str
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float:
        """CPU time the server has used so far, its child processes included (it leads its own session)."""
        return session_cpu_seconds(self.pid)


def session_cpu_seconds(session_id: int) -> float:
    """utime + stime of every process in session ``session_id``, plus what each has collected from reaped children.

    Read from /proc/PID/stat (fields 6: session, 14-17: utime, stime, cutime, cstime, in clock ticks).
    """
    ticks = 0
    for stat_path in PROC.glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
        except OSError:  # the process ended between the listing and the read
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # fields[0] is field 3 (state)
        if int(fields[3]) == session_id:
            ticks += sum(int(value) for value in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"server exited with {process.returncode} before it was ready:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status < 500:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f} s (log: {log_path})")


def stop(server: Server) -> None:
    if server.process.poll() is None:
        os.killpg(server.process.pid, signal.SIGTERM)
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=10)


@contextmanager
def running(
    name: str,
    command: list[str],
    port: int,
    ready_path: str,
    log_dir: Path,
    env: dict[str, str] | None = None,
    ready_timeout_s: float = 300.0,
    cwd: Path = REPO_ROOT,
) -> Iterator[Server]:
    """Run ``command`` in its own process group; yield once ``ready_path`` answers; stop it afterwards."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    full_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            command, cwd=cwd, env=full_env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        server = Server(name, f"http://127.0.0.1:{port}", process, log_path)
        try:
            wait_ready(server.base_url + ready_path, process, log_path, ready_timeout_s)
            if (count := serving_processes(command)) > 1:  # the first one's readiness opened the port
                wait_all_serving(server.base_url, count, process, ready_timeout_s)
            log.info("%s ready on port %d (pid %d)", name, port, process.pid)
            yield server
        finally:
            stop(server)


def serving_processes(command: list[str]) -> int:
    """How many serving processes ``python -m service ... --processes N`` (or ``--serve-processes N``) starts."""
    for flag in ("--processes", "--serve-processes"):
        if flag in command[:-1]:
            return int(command[command.index(flag) + 1])
    return 1


def wait_all_serving(base_url: str, count: int, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until each of ``count`` serving processes is ready (``bertserve_ready`` 1: warm, taking connections)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        if all(f'bertserve_ready{{process="{index}"}} 1.0' in text for index in range(count)):
            return
        time.sleep(0.5)
    raise RuntimeError(f"not every one of {count} serving processes served within {timeout_s:.0f} s")


def bertserve_command(models: dict[str, Path], port: int) -> list[str]:
    command = [sys.executable, "-m", "service", "--port", str(port)]
    for name, path in models.items():
        command += ["--model", f"{name}={path}"]
    return command


def naive_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "benchmarks.naive_app:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]


def naive_env(model_dir: Path, task: str) -> dict[str, str]:
    return {"NAIVE_MODEL": str(model_dir), "NAIVE_TASK": task}


def infinity_command(venv: Path, model_dir: Path, served_name: str, port: int, batch_size: int = 32) -> list[str]:
    launcher = "import sys; from infinity_emb.cli import cli; sys.argv[0] = 'infinity_emb'; cli()"
    return [
        str(venv / "bin" / "python"),
        "-c",
        launcher,
        "v2",
        "--model-id",
        str(model_dir),
        "--served-model-name",
        served_name,
        "--engine",
        "torch",
        "--device",
        "cpu",
        "--batch-size",
        str(batch_size),
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
    ]
