"""``python -m service`` keeps an idle keep-alive connection open for ``keep_alive_s`` (75 s), longer than client
pools keep theirs: uvicorn's own 5 s closed connections that a client under load was reusing at that moment, and
the client saw them reset without an answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.service.apptools import free_port, wait_until_ready
from tests.service.tiny_models import TinyModel

REPO = Path(__file__).resolve().parents[2]
LIVE = b"GET /health/live HTTP/1.1\r\nHost: test\r\n\r\n"


def answer_after_idle(port: int, idle_s: float) -> bytes:
    """One request, ``idle_s`` of silence, then another on the same connection: what the second one got."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(LIVE)
        assert connection.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(idle_s)
        try:
            connection.sendall(LIVE)
            return connection.recv(65536)
        except ConnectionError:
            return b""


def test_an_idle_connection_outlives_uvicorns_five_seconds_and_the_setting_bounds_it(
    text_classification_model: TinyModel,
) -> None:
    port = free_port()
    command = [
        sys.executable, "-m", "service", "--model", f"sst={text_classification_model.bundle}", "--port", str(port),
        "--intra-op-threads", "1", "--no-tune", "--log-level", "warning", "--keep-alive-s", "7",
    ]  # fmt: skip
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1"}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}", 60)
        assert answer_after_idle(port, 5.5).startswith(b"HTTP/1.1 200")  # past uvicorn's default 5 s
        assert answer_after_idle(port, 8.0) == b""  # past the 7 s asked for: closed
    finally:
        process.terminate()
        process.wait(30)
