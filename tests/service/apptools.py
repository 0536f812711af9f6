"""Running the app in-process for API tests: lifespan + httpx over ASGI, and a gate for the model."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from contract.onnx_io import PaddedRows
from service.app import create_app
from service.engine import Engine
from service.sessions import ModelRunner
from service.settings import Settings


class GatedRunner:
    """Wraps a real runner: each batch waits for ``gate``; records the token ids it runs."""

    def __init__(self, inner: ModelRunner, gate: threading.Event) -> None:
        self.inner = inner
        self.gate = gate
        self.output_names = inner.output_names
        self.entered = threading.Event()
        self.seen: list[np.ndarray] = []

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        self.seen.append(batch.input_ids[batch.attention_mask == 1])
        self.entered.set()
        self.gate.wait(10)
        return self.inner.run(batch)

    def seen_ids(self) -> set[int]:
        return {int(value) for ids in self.seen for value in ids}


class WorkerKilled(BaseException):
    """Not an Exception: it kills the worker thread instead of failing one batch."""


class DeadlyRunner:
    output_names = ("logits",)

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        raise WorkerKilled()


def gate_engine(engine: Engine) -> tuple[GatedRunner, threading.Event]:
    assert len(engine.workers) == 1, "gating holds one worker: serve with model_workers=1"
    gate = threading.Event()
    runner = GatedRunner(engine.pool.runner, gate)
    engine.workers[0].runner = engine.pool.runner = runner
    return runner, gate


async def wait_for(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


async def wait_ready(client: httpx.AsyncClient, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (await client.get("/health/ready")).status_code != 200:
        assert loop.time() < deadline, "service never became ready"
        await asyncio.sleep(0.005)


def ready_client(client: TestClient, timeout: float = 30.0) -> TestClient:
    """``client`` once its app's /health/ready answers 200 (the models are loaded and warmed up)."""
    deadline = time.monotonic() + timeout
    while client.get("/health/ready").status_code != 200:
        assert time.monotonic() < deadline, "service never became ready"
        time.sleep(0.01)
    return client


@contextmanager
def ready_app_client(settings: Settings, timeout: float = 10.0) -> Iterator[TestClient]:
    """A TestClient on ``create_app(settings)`` (its lifespan loads the models), handed over by ``ready_client``."""
    with TestClient(create_app(settings)) as client:
        yield ready_client(client, timeout)


@asynccontextmanager
async def serving(
    settings: Settings, engines: Mapping[str, Engine] | None = None, ready: bool = True
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    app = create_app(settings, engines=engines)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            if ready:
                await wait_ready(client)
            yield app, client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_ready(url: str, timeout_s: float, alive: Callable[[], None] = lambda: None) -> None:
    """Poll ``url``/health/ready until it answers 200; ``alive`` raises if the server has gone meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive()
        try:
            if httpx.get(f"{url}/health/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server never became ready"
        time.sleep(0.05)


@contextmanager
def real_server(settings: Settings, ready_timeout_s: float = 30.0) -> Iterator[str]:
    """A real uvicorn server (in a thread) on ``settings.port``; yields its base URL once /health/ready answers 200."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=settings.port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{settings.port}"
    try:
        wait_until_ready(url, ready_timeout_s)
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def real_server_for(bundles: Mapping[str, Path], **settings: Any) -> Iterator[str]:
    """``real_server`` on a free port with one ORT thread, serving ``bundles`` (model name -> bundle folder) with the
    other ``settings`` as given."""
    served = Settings(
        models=[f"{name}={path}" for name, path in bundles.items()], port=free_port(), intra_op_threads=1, **settings
    )
    with real_server(served) as url:
        yield url


def bundles_server(**settings: Any) -> Any:
    """A test module's ``server_url`` fixture (module-scoped): ``real_server_for`` its ``bundles`` fixture, with
    ``settings``."""

    @pytest.fixture(scope="module")
    def server_url(bundles: dict[str, Path]) -> Iterator[str]:
        with real_server_for(bundles, **settings) as url:
            yield url

    return server_url


def request_body(spec: dict[str, Any], path: str) -> tuple[str | None, dict[str, Any]]:
    """A POST route's JSON body in the OpenAPI document: the named request body it refers to (None when inline), and
    its schema."""
    body = spec["paths"][path]["post"]["requestBody"]
    name = None
    if "$ref" in body:
        name = body["$ref"].removeprefix("#/components/requestBodies/")
        body = spec["components"]["requestBodies"][name]
    return name, body["content"]["application/json"]["schema"]
