"""The protocol-independent request path (service.core) and the one error -> status mapping."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any, cast

import pytest

from service import errors
from service.core import InferenceRequest, ModelRegistry, run_inference, until_disconnected
from service.engine import Engine
from service.settings import Settings


class EchoEngine:
    """Just what run_inference needs of an engine: name, task, request defaults (none), infer."""

    def __init__(self, name: str, task: str, delay_s: float = 0.0) -> None:
        self.name, self.task, self.delay_s = name, task, delay_s
        self.started = asyncio.Event()

    def with_request_defaults(self, params: Any, explicit: Callable[[], frozenset[str]] | None) -> Any:
        return params

    async def infer(
        self, inputs: list[Any], params: Any, timeout_s: float | None = None, background: bool = False
    ) -> list[Any]:
        self.started.set()
        await asyncio.sleep(self.delay_s)
        return [(item, params) for item in inputs]


def registry(*engines: EchoEngine) -> ModelRegistry:
    return ModelRegistry({engine.name: cast(Engine, engine) for engine in engines})


def test_run_inference_selects_the_engine_unless_given_and_enforces_the_input_limit() -> None:
    models = registry(EchoEngine("a", "fill-mask"), EchoEngine("b", "text-classification"))
    settings = Settings(max_inputs_per_request=2)
    result = asyncio.run(run_inference(InferenceRequest("fill-mask", ["x", "y"], 3), models, settings))
    assert (result.model, result.results) == ("a", [("x", 3), ("y", 3)])
    with pytest.raises(errors.PayloadTooLarge, match="3 inputs"):
        asyncio.run(run_inference(InferenceRequest("fill-mask", ["x"] * 3, None), models, settings))
    with pytest.raises(errors.ModelNotFound):  # the model is looked up before the inputs are counted
        asyncio.run(run_inference(InferenceRequest("fill-mask", ["x"] * 3, None, model="c"), models, settings))
    with pytest.raises(errors.BadRequest, match="serves text-classification"):
        asyncio.run(run_inference(InferenceRequest("fill-mask", ["x"], None, model="b"), models, settings))
    named = InferenceRequest("fill-mask", ["x"], 3, model="not looked up")
    chosen = asyncio.run(run_inference(named, models, settings, engine=models.engines["a"]))
    assert (chosen.model, chosen.results) == ("a", [("x", 3)])  # the engine the protocol chose (OIP v2's path)


def test_a_client_that_goes_away_cancels_the_work_and_one_that_stays_gets_the_answer() -> None:
    async def main() -> None:
        slow = EchoEngine("a", "fill-mask", delay_s=30)
        gone = asyncio.Event()
        call = asyncio.ensure_future(
            run_inference(InferenceRequest("fill-mask", ["x"], None), registry(slow), Settings(), gone.wait)
        )
        await slow.started.wait()
        gone.set()
        with pytest.raises(errors.ClientClosedRequest):
            await call
        assert await until_disconnected(asyncio.sleep(0, "done"), asyncio.Event().wait) == "done"

    asyncio.run(main())


def test_the_request_path_imports_no_web_framework() -> None:
    code = (
        "import sys, service.core;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'starlette'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_each_status_code_comes_from_one_error_class() -> None:
    classes = [cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.ServiceError)]
    assert all(cls.description and cls.error_type for cls in classes)
    assert errors.HTTP_ERROR_TYPES == {  # what routing and validation errors are answered with
        400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large",
        415: "unsupported_media_type", 422: "validation_error", 429: "overloaded", 500: "internal_error",
        503: "not_ready", 504: "timeout",
    }  # fmt: skip
    assert errors.http_error_type(404) == "not_found" and errors.http_error_type(418) == "client_error"
    documented = errors.documented_statuses(errors.NotReady, errors.RequestTimeout)
    assert documented == {503: errors.NotReady.description, 504: errors.RequestTimeout.description}
