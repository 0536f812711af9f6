"""What a protocol adapter is: its inference routes, each with its path, its OpenAPI documentation, how its body
becomes the task's request and how the task's answer becomes its response.

``service.api.entry.InferenceEntry`` serves every route of every protocol in ``service.api.protocols.PROTOCOLS``
(reading the body, checking its media type, watching for disconnects, writing errors, labelling the route), and
``service.api.declared`` declares them to FastAPI for the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from service.api.error_docs import TASK_ERROR_RESPONSES
from service.core import InferenceResult, ModelRegistry
from service.middleware import JSON_MEDIA_TYPE, encode_json, header
from service.schemas.common import TaskRequest

if TYPE_CHECKING:
    from service.engine import Engine


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request to a route that reads its body itself: the body, its headers and the path's parameters."""

    body: bytes
    content_type: str | None
    headers: list[tuple[bytes, bytes]]
    path_params: dict[str, str]

    def header(self, name: str) -> str | None:
        return header(self.headers, name.lower().encode())


@dataclass(frozen=True, slots=True)
class Decoded:
    """A request in the task's terms: its task request (validated), the engine when the protocol chose it (a v2 path
    names its model; else the registry selects by the request's task and model), and what the answer needs."""

    request: TaskRequest
    engine: Engine | None = None
    context: Any = None


@dataclass(frozen=True, slots=True)
class Reply:
    content: bytes
    media_type: str = JSON_MEDIA_TYPE
    headers: Mapping[str, str] = field(default_factory=dict)


def json_reply(payload: Any) -> Reply:
    return Reply(encode_json(payload))


Decoder = Callable[[Incoming, ModelRegistry], Decoded]
Answer = Callable[[Decoded, InferenceResult], Reply]


@dataclass(frozen=True)
class InferenceRoute:
    """One POST route. Its body is either ``body``, a JSON body read and validated as FastAPI reads a route's body
    parameter, or read by ``decode`` (the route's own format; its OpenAPI body then comes from ``openapi_extra``)."""

    path: str  # a path template: /v1/embeddings, /v2/models/{name}/infer
    operation: str  # the operation's name: OpenAPI's operationId and summary are made from it
    description: str
    tag: str
    response_model: Any
    answer: Answer
    body: type[TaskRequest] | None = None
    decode: Decoder | None = None
    responses: Mapping[int | str, dict[str, Any]] = field(default_factory=lambda: TASK_ERROR_RESPONSES)
    openapi_extra: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if (self.body is None) == (self.decode is None):
            raise ValueError(f"{self.path}: give either a JSON body model or a decoder")


@dataclass(frozen=True)
class Protocol:
    """A protocol's inference routes, and the routes of it FastAPI serves itself (health, metadata), if any."""

    name: str
    routes: tuple[InferenceRoute, ...]
    router: APIRouter | None = None
