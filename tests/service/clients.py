"""The service app in process behind Starlette's TestClient, handed over once /health/ready answers 200."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings


@contextmanager
def ready_client(settings: Settings, timeout_s: float = 10.0) -> Iterator[TestClient]:
    """A TestClient on ``create_app(settings)`` (lifespan run: the models load) once every model is ready."""
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + timeout_s
        while client.get("/health/ready").status_code != 200:
            assert time.monotonic() < deadline, f"service never became ready: {client.get('/health/ready').json()}"
            time.sleep(0.01)
        yield client
