"""Triton's ``ModelStreamInfer`` through tritonclient.grpc's own stream (``start_stream`` / ``async_stream_infer``)
against a real server with an API key: every request on the stream gets ModelInfer's answer for it, a bad one gets
its error on the stream while the others are answered, and a stream without the key is refused."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.service.apptools import free_port, real_server_for
from tests.service.tiny_models import TinyModel

grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

KEY = {"authorization": "Bearer stream-key"}
TEXTS = ["the movie was wonderful.", "john smith lives in paris.", "the team won the game in extra time", "paris"]


@pytest.fixture(scope="module")
def target(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, grpc_port=port, tune=False, api_keys=["stream-key"]):
        yield f"127.0.0.1:{port}"


def text_input(texts: list[str]) -> Any:
    tensor = grpcclient.InferInput("text", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array(texts, dtype=object))
    return tensor


def streamed(target: str, requests: list[dict[str, Any]], headers: dict[str, str] | None) -> list[tuple[Any, Any]]:
    """Send ``requests`` (async_stream_infer's arguments) on one stream; the (result, error) of each response."""
    client = grpcclient.InferenceServerClient(target)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=headers)
    for request in requests:
        client.async_stream_infer("sst", **request)
    client.stop_stream()  # the client's side closes; the stream ends once every request is answered
    client.close()
    return [answers.get_nowait() for _ in range(answers.qsize())]


def test_each_request_gets_model_infer_s_answer(target: str) -> None:
    batches = [TEXTS[:1], TEXTS[1:3], TEXTS, TEXTS[2:], TEXTS[3:], TEXTS[:2]]
    requests = [
        {"inputs": [text_input(texts)], "request_id": str(number), "parameters": {"top_k": 2}}
        for number, texts in enumerate(batches)
    ]
    answers = streamed(target, requests, KEY)
    assert [error for _, error in answers] == [None] * len(batches)
    by_id = {result.get_response().id: result for result, _ in answers}
    assert sorted(by_id) == [str(number) for number in range(len(batches))]
    alone = grpcclient.InferenceServerClient(target)
    for number, texts in enumerate(batches):
        expected = alone.infer("sst", [text_input(texts)], parameters={"top_k": 2}, headers=KEY)
        for output in ("label", "score"):
            assert np.array_equal(by_id[str(number)].as_numpy(output), expected.as_numpy(output)), (number, output)


def test_a_bad_request_gets_its_error_and_the_stream_goes_on(target: str) -> None:
    requests = [
        {"inputs": [text_input(TEXTS[:2])], "request_id": "good-1"},
        {"inputs": [text_input(TEXTS[:2])], "request_id": "bad", "parameters": {"colour": "blue"}},
        {"inputs": [text_input(TEXTS[2:])], "request_id": "good-2"},
    ]
    answers = streamed(target, requests, KEY)
    errors = [error for _, error in answers if error is not None]
    assert len(answers) == 3 and len(errors) == 1
    assert isinstance(errors[0], InferenceServerException) and "unknown parameter 'colour'" in errors[0].message()
    assert sorted(result.get_response().id for result, error in answers if error is None) == ["good-1", "good-2"]


def test_a_stream_without_the_key_is_refused(target: str) -> None:
    client = grpcclient.InferenceServerClient(target)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("sst", [text_input(TEXTS[:1])], request_id="x")
    except InferenceServerException as refused:  # the server may have ended the stream before this request went
        assert "no longer in valid state" in refused.message()
    result, error = answers.get(timeout=10)
    client.stop_stream()
    client.close()
    assert result is None and "API key" in error.message() and "UNAUTHENTICATED" in str(error.status())


def test_a_stream_longer_than_the_in_flight_limit_is_answered_whole(tiny_models: dict[str, TinyModel]) -> None:
    """A stream's unanswered requests are held to the server's in-flight limit (2 here); the rest wait to be read."""
    port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle}
    with real_server_for(bundles, grpc_port=port, tune=False, max_concurrent_requests=2):
        requests = [{"inputs": [text_input(TEXTS[:2])], "request_id": str(number)} for number in range(12)]
        answers = streamed(f"127.0.0.1:{port}", requests, None)
    assert [error for _, error in answers] == [None] * 12
    assert sorted(int(result.get_response().id) for result, _ in answers) == list(range(12))
