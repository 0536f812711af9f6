"""Request bodies in and responses out over ASGI, for the middlewares and the inference entry (no framework).

Responses are compact UTF-8 JSON, as Starlette's JSONResponse writes them, so a body written here is byte for
byte the body a FastAPI route would have answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from starlette.types import Message, Receive, Scope, Send

from service.errors import PayloadTooLarge, ServiceError
from service.request_errors import JSON_MEDIA_TYPE


def _to_builtin(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def encode_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON; numpy scalars and arrays as numbers and lists."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=_to_builtin).encode()


async def send_body(
    send: Send, status: int, content: bytes, media_type: str, headers: Mapping[str, str] | None = None
) -> None:
    """A whole response: ``content`` with its length, media type and ``headers``."""
    raw_headers = [(b"content-length", str(len(content)).encode()), (b"content-type", media_type.encode())]
    raw_headers += [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": content})


async def send_json(send: Send, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
    await send_body(send, status, encode_json(payload), JSON_MEDIA_TYPE, headers)


async def send_error(send: Send, error: ServiceError, path: str = "", close: bool = False) -> None:
    """Answer with ``error``: its status, its body for a request to ``path``, its headers (Retry-After, ...);
    ``close``: the server closes the connection after it (the body was not read in full)."""
    headers = {**error.headers(), "Connection": "close"} if close else error.headers()
    await send_json(send, error.status_code, error.body(path), headers)


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client left while sending it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def body_too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body is larger than {max_bytes} bytes")


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first gives ``body`` again (read already), then defers to the server (disconnects)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case), as Starlette's ``request.headers.get`` gives it."""
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def route_path(scope: Scope) -> str:
    """The path the app's routes match: ``path`` less the ``root_path`` the app is mounted at (Starlette's rule)."""
    path: str = scope["path"]
    root = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    if path == root:
        return ""
    return path[len(root) :] if path[len(root)] == "/" else path
