"""Graceful shutdown of the real server process: SIGTERM with requests in flight loses none of them.

This is what a container runtime (podman stop, Kubernetes pod deletion) does to the service. The
requests are made slow by the batcher itself: with a long ``--max-wait-ms`` and a batch far from full,
every row waits in the queue, so all of them are still in flight when SIGTERM arrives.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.servers import get, start_server
from tests.service.tiny_models import build_tiny_models, cache_key

CONCURRENT_REQUESTS = 8
BATCH_WAIT_MS = 2500


@pytest.fixture(scope="module")
def tiny_classifier_bundle(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny text-classification bundle the service tests use (same cache folder, built once)."""
    cache = getattr(pytestconfig, "cache", None)
    base = Path(cache.mkdir("bertserve-tiny-models")) if cache is not None else tmp_path_factory.mktemp("tiny")
    return build_tiny_models(base / cache_key())["text-classification"].bundle


def classify(base_url: str, text: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{base_url}/v1/text-classification",
        data=json.dumps({"model": "tiny", "inputs": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, {"error": error.read().decode()}


def requests_in_flight(base_url: str) -> float:
    _, text = get(f"{base_url}/metrics")
    match = re.search(r"^bertserve_requests_in_flight(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.MULTILINE)
    assert match, "the service no longer exports bertserve_requests_in_flight"
    return float(match.group(1))


def connection_refused(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@dataclass
class ShutdownRun:
    """What one SIGTERM-while-busy run of the server showed."""

    answers: list[tuple[int, dict]]
    refused_while_draining: bool
    refused_after_exit: bool
    returncode: int
    output: str


def sigterm_while_busy(process: subprocess.Popen[bytes], port: int) -> ShutdownRun:
    base_url = f"http://127.0.0.1:{port}"
    texts = [f"request number {index} was a wonderful movie" for index in range(CONCURRENT_REQUESTS)]
    with ThreadPoolExecutor(CONCURRENT_REQUESTS) as pool:
        started = time.monotonic()
        futures = [pool.submit(classify, base_url, text) for text in texts]
        while requests_in_flight(base_url) < CONCURRENT_REQUESTS:
            assert time.monotonic() - started < BATCH_WAIT_MS / 1000, "requests finished before SIGTERM could be sent"
            time.sleep(0.05)
        assert not any(future.done() for future in futures), "a request finished before SIGTERM was sent"
        process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        refused_while_draining = False
        while process.poll() is None and time.monotonic() - signalled < BATCH_WAIT_MS / 1000:
            if connection_refused(port):
                refused_while_draining = not all(future.done() for future in futures)
                break
            time.sleep(0.05)
        answers = [future.result(timeout=60) for future in futures]
    output = process.communicate(timeout=60)[0].decode()
    return ShutdownRun(answers, refused_while_draining, connection_refused(port), process.returncode, output)


@pytest.fixture(scope="module")
def shutdown_run(tiny_classifier_bundle: Path) -> Iterator[ShutdownRun]:
    process, port = start_server(
        [
            "--model", f"tiny={tiny_classifier_bundle}", "--max-wait-ms", str(BATCH_WAIT_MS), "--max-batch-size", "64",
            "--intra-op-threads", "1", "--log-level", "warning",
        ]
    )  # fmt: skip
    try:
        yield sigterm_while_busy(process, port)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_every_in_flight_request_is_answered(shutdown_run: ShutdownRun) -> None:
    assert [status for status, _ in shutdown_run.answers] == [200] * CONCURRENT_REQUESTS, shutdown_run.answers
    for _, body in shutdown_run.answers:
        assert body["model"] == "tiny"
        assert len(body["results"]) == 1 and body["results"][0][0]["label"]


def test_new_connections_are_refused_while_draining(shutdown_run: ShutdownRun) -> None:
    assert shutdown_run.refused_while_draining, "new connections were still accepted while requests drained"
    assert shutdown_run.refused_after_exit


def test_process_exits_0_after_sigterm(shutdown_run: ShutdownRun) -> None:
    assert shutdown_run.returncode == 0, shutdown_run.output[-2000:]
