"""FastAPI's request validation errors as the service's errors.

A body that is not valid JSON is a 400 naming where it breaks; a body sent with a media type that is
not JSON (``curl -d`` sends form-urlencoded) or without Content-Type is a 415 naming the header to
send (FastAPI parses neither as JSON: a body without Content-Type would let a web page post to a
local service without a CORS preflight); everything else is a 422 listing the first problems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any

from service.errors import BadRequest, InvalidRequest, ServiceError, UnsupportedMediaType

MAX_LISTED_PROBLEMS = 5


def is_json_media_type(content_type: str) -> bool:
    """FastAPI's rule: application/json or application/*+json (parameters such as charset aside)."""
    message = Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def validation_error(errors: Sequence[Mapping[str, Any]], content_type: str | None) -> ServiceError:
    """The error to answer for FastAPI's validation ``errors`` of a request sent with ``content_type``."""
    for error in errors:
        if error.get("type") == "json_invalid":
            loc = tuple(error.get("loc", ()))
            position = loc[1] if len(loc) > 1 else "?"
            reason = (error.get("ctx") or {}).get("error", "JSON decode error")
            return BadRequest(f"the body is not valid JSON: {reason} at character {position}")
    body_itself = any(tuple(error.get("loc", ())) == ("body",) for error in errors)
    if body_itself and not (content_type and is_json_media_type(content_type)):
        sent = f"not {content_type!r}" if content_type else "none was sent"
        return UnsupportedMediaType(f"the body must be JSON: send 'Content-Type: application/json' ({sent})")
    problems = []
    for error in errors[:MAX_LISTED_PROBLEMS]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return InvalidRequest("; ".join(problems) or "invalid request")
