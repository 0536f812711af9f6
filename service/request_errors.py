"""Request bodies that do not parse or validate, as the service's errors; and JSON bodies read by FastAPI's rules.

A body that is not valid JSON is a 400 naming where it breaks; a body sent with a media type that is
not JSON (``curl -d`` sends form-urlencoded) or without Content-Type is a 415 naming the header to
send (FastAPI parses neither as JSON: a body without Content-Type would let a web page post to a
local service without a CORS preflight); everything else is a 422 listing the first problems.

``validated_json_body`` reads a route's JSON body as FastAPI reads the body parameter of a route (its
media type rule, pydantic's python-mode validation, error locations under ``body``), so the inference entry
answers in FastAPI's words; the JSON itself is parsed by ``service.json_rules`` (UTF-8, depth, items, numbers,
duplicate keys: one rule for every route and protocol), and a body of more than 1,000 problems gets them counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from service.errors import BadRequest, InvalidRequest, ServiceError, UnsupportedMediaType
from service.json_rules import parse_json

MAX_LISTED_PROBLEMS = 5
# Past this many problems they are counted, not listed: pydantic turns each into a dict (~4 us), and a body of
# wrongly typed items brings one or two per item.
MAX_DETAILED_PROBLEMS = 1000
JSON_MEDIA_TYPE = "application/json"

Model = TypeVar("Model", bound=BaseModel)


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
            return BadRequest(f"the body is not valid JSON at character {position}: {reason}")
    body_itself = any(tuple(error.get("loc", ())) == ("body",) for error in errors)
    if body_itself and not (content_type and is_json_media_type(content_type)):
        sent = f"not {content_type!r}" if content_type else "none was sent"
        return UnsupportedMediaType(f"the body must be JSON: send 'Content-Type: application/json' ({sent})")
    problems = []
    for error in errors[:MAX_LISTED_PROBLEMS]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return InvalidRequest("; ".join(problems) or "invalid request")


def invalid_value(exc: ValidationError, content_type: str | None, prefix: tuple[str, ...] = ()) -> ServiceError:
    """The error to answer for pydantic's ``exc``, its locations under ``prefix`` (``("body",)``: FastAPI's)."""
    count = exc.error_count()
    if count > MAX_DETAILED_PROBLEMS:
        return InvalidRequest(f"{count} problems with the body, too many to list: see the route's schema at /docs")
    located = [{**error, "loc": (*prefix, *error["loc"])} for error in exc.errors(include_url=False)]
    return validation_error(located, content_type)


def validated_json_body(model: type[Model], body: bytes, content_type: str | None) -> Model:
    """``body`` as ``model``, or the ServiceError FastAPI's handling of a route's ``model`` body leads to.

    A body is parsed as JSON only when it is sent as JSON; any other body reaches validation as it is, and fails
    there: a 415, as from FastAPI. An empty body sent as JSON is a 400, as invalid JSON is.
    """
    value: Any = body
    if not body:
        if content_type and is_json_media_type(content_type):
            raise BadRequest("the body is empty: send a JSON object (the route's schema is at /docs)")
        errors: list[Mapping[str, Any]] = [{"type": "missing", "loc": ("body",), "msg": "Field required"}]
        raise validation_error(errors, content_type)
    if content_type == JSON_MEDIA_TYPE or (content_type and is_json_media_type(content_type)):
        value = parse_json(body)
    try:
        return model.model_validate(value, from_attributes=True)
    except ValidationError as exc:
        raise invalid_value(exc, content_type, ("body",)) from None
