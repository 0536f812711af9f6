"""Start ``python -m service`` as a real process on a free port and wait until it is ready."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from tests.docker.conftest import REPO


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def start_server(service_args: list[str], ready_timeout_s: float = 60.0) -> tuple[subprocess.Popen[bytes], int]:
    """The server process (stdout and stderr piped together) and its port, once /health/ready says 200."""
    port = free_port()
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "service", "--port", str(port), *service_args]
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + ready_timeout_s
    while True:
        if process.poll() is not None:
            raise AssertionError(f"the server exited early: {process.communicate()[0].decode()[-2000:]}")
        try:
            if get(f"http://127.0.0.1:{port}/health/ready", timeout=2)[0] == 200:
                return process, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the server did not become ready within {ready_timeout_s:.0f} s")
        time.sleep(0.2)
