"""How a request's JSON body is read and validated, on every inference route of every protocol, and how JSON
answers are written (``encode_json``: compact UTF-8, as Starlette's JSONResponse writes them; float arrays, the
embeddings and logits, by orjson, to the same bytes).

## Bodies that do not parse or validate

A body that is not valid JSON is a 400 naming where it breaks; a body sent with a media type that is
not JSON (``curl -d`` sends form-urlencoded) or without Content-Type is a 415 naming the header to
send (FastAPI parses neither as JSON: a body without Content-Type would let a web page post to a
local service without a CORS preflight); everything else is a 422 listing the first problems.

``validated_json_body`` reads a route's JSON body as FastAPI reads the body parameter of a route (its
media type rule, pydantic's python-mode validation, error locations under ``body``), so the inference entry
answers in FastAPI's words; the JSON itself is parsed by ``parse_json`` (UTF-8, depth, items, numbers,
duplicate keys: one rule for every route and protocol), and a body of more than 1,000 problems gets them counted.

## JSON: ``parse_json``, the one way a JSON body is read

The body's bytes are checked before any parser runs, so nothing recurses, converts or allocates per item on a
hostile body; then it is parsed once. Each rule broken is a 400 naming it:

- UTF-8 only (RFC 8259 8.1): a body in another encoding is refused, where Python's ``json`` would guess UTF-16/32;
- at most ``MAX_DEPTH`` (16) levels of arrays and objects: the deepest valid request, a v2 tensor with 2-d data,
  needs 5;
- at most ``MAX_ITEMS`` (32,768) array elements and object members, every level counted: twice what a valid request
  needs at the default limits (one per word or text: 16,384 words of NER's pre-split ``words`` fill
  ``max_request_tokens``; 2,048 embedding texts). Validation costs time per item on the event loop: an 800 KB list
  of numbers took 3.7 s to become 800,000 validation errors;
- a number is at most ``MAX_NUMBER_CHARS`` (32) characters (an int64 needs 20, a float64's shortest form 24) and
  finite as a double: ``NaN``, ``Infinity`` and ``1e999`` are refused, where Python's ``json`` gives nan and inf;
- an object names each key once: parsers disagree on which copy of a duplicate key wins, so none does;
- a string holds Unicode text: a ``\\ud800``-style escape of half a surrogate pair (which ``json`` turns into a str
  no UTF-8 encoder, tokenizer included, accepts) is refused.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any, TypeVar

import numpy as np
import orjson
from pydantic import BaseModel, ValidationError

from service.errors import BadRequest, InvalidRequest, ServiceError, UnsupportedMediaType

JSON_MEDIA_TYPE = "application/json"


def _to_builtin(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Python writes a float's shortest round-trip digits in exponent form below 1e-4 and from 1e16 (``repr``: 1e-05,
# 1e+16); orjson writes the same digits, but positionally or with a bare exponent (0.00001, 1e-5) there.
REPR_EXPONENT_BELOW, REPR_EXPONENT_FROM = 1e-4, 1e16


def float_array_json(array: np.ndarray) -> bytes | None:
    """``array.tolist()`` as ``json.dumps`` writes it, by orjson: the same bytes at ~1/6 of the time (an answer of one
    384-float embedding: 35 us against 194, ``python -m benchmarks.studies.json_floats``). None for an array holding
    NaN or infinity (``json`` writes NaN, orjson null)."""
    values = np.ascontiguousarray(array, dtype=np.float64)  # orjson takes C-contiguous arrays only
    return _finite_json(values) if np.isfinite(values).all() else None


def _finite_json(values: np.ndarray) -> bytes:
    if values.ndim > 1:
        return b"[" + b",".join(_finite_json(row) for row in values) + b"]"
    text = orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)
    magnitude = np.abs(values)
    exponent_form = np.flatnonzero(
        ((magnitude < REPR_EXPONENT_BELOW) & (magnitude > 0)) | (magnitude >= REPR_EXPONENT_FROM)
    )
    if exponent_form.size == 0:
        return text
    numbers = text[1:-1].split(b",")
    for index in exponent_form.tolist():
        numbers[index] = repr(float(values[index])).encode()
    return b"[" + b",".join(numbers) + b"]"


# Stands in json.dumps's output for a float array written by orjson, until that array's JSON replaces it: the
# process's own secret, so no string a client sends can pass for one.
_ARRAY_MARK = f"\x00{secrets.token_hex(8)}\x00"
_ARRAY_MARK_JSON = json.dumps(_ARRAY_MARK)


def encode_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON; numpy scalars and arrays as numbers and lists (float arrays by ``float_array_json``)."""
    arrays: list[bytes] = []

    def builtin_or_marked(value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.ndim > 0 and value.dtype.kind == "f":
            array_json = float_array_json(value)
            if array_json is not None:
                arrays.append(array_json)
                return _ARRAY_MARK
        return _to_builtin(value)

    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=builtin_or_marked)
    if not arrays:
        return text.encode()
    parts = text.split(_ARRAY_MARK_JSON)
    assert len(parts) == len(arrays) + 1, "an array mark appeared outside the arrays it stands for"
    pieces = [parts[0].encode()]
    for array_json, part in zip(arrays, parts[1:], strict=True):
        pieces += (array_json, part.encode())
    return b"".join(pieces)


MAX_LISTED_PROBLEMS = 5
# Past this many problems they are counted, not listed: pydantic turns each into a dict (~4 us), and a body of
# wrongly typed items brings one or two per item.
MAX_DETAILED_PROBLEMS = 1000

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
    for error in collapse_unions(errors)[:MAX_LISTED_PROBLEMS]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return InvalidRequest("; ".join(problems) or "invalid request")


BUILTIN_TAGS = frozenset({"str", "int", "float", "bool", "bytes", "dict", "list", "none"})


def is_union_tag(part: Any) -> bool:
    """Whether a location part names a union's member (pydantic's tag: ``str``, ``TextPair``, ``list[str]``),
    not a field (snake_case) or an index."""
    return isinstance(part, str) and ("[" in part or part[:1].isupper() or part in BUILTIN_TAGS)


def collapse_unions(errors: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One problem per value a union refused, in words: pydantic gives one per member (``inputs.str: ...;
    inputs.TextPair: ...; inputs.list[...]: ...``). Where the value got into a member (an object with a bad field,
    a list with a bad item) only that member's problems are kept, its tag dropped from their location; where it
    got into none, one problem names the types the place takes."""
    kept: list[Mapping[str, Any]] = []
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for error in errors:
        loc = tuple(error.get("loc", ()))
        at = next((index for index, part in enumerate(loc) if is_union_tag(part)), None)
        if at is None:
            kept.append(error)
        else:
            groups.setdefault(loc[:at], []).append(error)
    for prefix, members in groups.items():
        at = len(prefix)
        deeper = [error for error in members if len(error["loc"]) > at + 1]
        if deeper:
            kept += collapse_unions([{**error, "loc": (*prefix, *tuple(error["loc"])[at + 1 :])} for error in deeper])
            continue
        tags = ", ".join(dict.fromkeys(str(tuple(error["loc"])[at]) for error in members))
        given = members[0].get("input")
        what = "null" if given is None else f"{type(given).__name__} {given!r}"[:80]
        kept.append({"type": "union", "loc": prefix, "msg": f"{what} is none of the accepted types: {tags}"})
    return kept


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


MAX_DEPTH = 16
MAX_ITEMS = 32_768
MAX_NUMBER_CHARS = 32

STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a JSON string, escapes included
STRUCTURE = b"[]{},"
NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in STRUCTURE)
LONG_NUMBER = re.compile(rb"[-+0-9.eE]{%d,}" % (MAX_NUMBER_CHARS + 1))
OPENING = np.frombuffer(b"[{", np.uint8)
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_json(body: bytes) -> Any:
    """``body`` as a JSON value, read by the rules above; BadRequest (400) naming the rule a body breaks."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(
            f"the body is not UTF-8: byte {exc.start} ({body[exc.start]:#04x}) cannot start a character"
        ) from None
    check_shape(body)
    try:
        value = json.loads(text, object_pairs_hook=unique_keys, parse_float=finite_float, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON at character {exc.pos}: {exc.msg}") from None
    if SURROGATE_ESCAPE.search(body) is not None:
        check_unicode(value)
    return value


def check_unicode(value: Any) -> None:
    """Every string (keys included) encodes as UTF-8: surrogate escapes come in pairs."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(
                f"a string in the body holds half a surrogate pair (\\u{ord(value[exc.start]):04x} at character "
                f"{exc.start} of the string): not Unicode text"
            ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_unicode(key)
            check_unicode(item)
    elif isinstance(value, list):
        for item in value:
            check_unicode(item)


def check_shape(body: bytes) -> None:
    """Depth, item count and number lengths, from the bytes outside strings (strings cannot hide brackets)."""
    bare = STRING.sub(b'""', body)
    long_number = LONG_NUMBER.search(bare)
    if long_number is not None:
        raise BadRequest(f"a number in the body is longer than {MAX_NUMBER_CHARS} characters")
    structure = bare.translate(None, NOT_STRUCTURE)
    opened = structure.count(b"[") + structure.count(b"{")
    empty = structure.count(b"[]") + structure.count(b"{}")
    items = structure.count(b",") + opened - empty
    if opened > MAX_DEPTH and nesting_depth(structure) > MAX_DEPTH:
        raise BadRequest(f"the body nests JSON more than {MAX_DEPTH} levels deep (arrays and objects)")
    if items > MAX_ITEMS:
        raise BadRequest(f"the body holds {items} JSON items (array elements, object members); at most {MAX_ITEMS}")


def nesting_depth(structure: bytes) -> int:
    """The deepest nesting of brackets in ``structure`` (brackets and commas only)."""
    symbols = np.frombuffer(structure, np.uint8)
    brackets = symbols[symbols != ord(",")]
    steps = np.where(np.isin(brackets, OPENING), 1, -1)
    return int(np.cumsum(steps).max(initial=0))


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadRequest(f"the key {key!r} appears twice in one JSON object")
            seen.add(key)
    return members


def finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise BadRequest(f"the number {literal} is out of range (beyond a double)")
    return value


def no_constant(name: str) -> float:
    raise BadRequest(f"{name} is not a JSON number")
