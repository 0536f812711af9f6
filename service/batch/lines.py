"""A batch's input lines and output entries, in OpenAI's batch file format.

An input line is ``{"custom_id", "method": "POST", "url", "body"}``. Each non-blank line gets exactly one entry:

- ``{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}``: the route's answer,
  in the output file when it is a 200, else in the error file (its body the route's error body);
- ``{"id", "custom_id", "response": null, "error": {"code", "message"}}`` in the error file: the line could not be
  sent (not JSON, no custom_id, another url than the batch's endpoint, a custom_id used before, the batch expired).

Entry ids are made from the batch id and the line's number, so a resumed batch writes the same ids.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INVALID_JSON, INVALID_LINE, INVALID_URL = "invalid_json_line", "invalid_request", "invalid_url"
DUPLICATE_CUSTOM_ID, BATCH_EXPIRED = "duplicate_custom_id", "batch_expired"


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A JSON value written already, as compact UTF-8 (the route's answer as the online route sends it): an entry
    takes its bytes as they are, instead of reading them back into objects and writing those again (an embeddings
    answer's floats cost several times their model time to write again with ``json``)."""

    content: bytes


@dataclass(frozen=True, slots=True)
class LineRequest:
    """A line that reads as a request: its body goes to the route at ``url``."""

    custom_id: str
    url: str
    body: Any


@dataclass(frozen=True, slots=True)
class Unsendable:
    """A line that cannot be sent, and why."""

    custom_id: str | None
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    """Where each request line of an input file is, and which lines repeat an earlier line's custom_id."""

    spans: list[tuple[int, int]]  # (offset, length) of each non-blank line
    repeats: dict[int, int]  # line number -> the number of the first line with its custom_id

    def __len__(self) -> int:
        return len(self.spans)


def plan_lines(path: Path) -> Plan:
    """Read an input file once (blocking): its request lines and their repeated custom_ids."""
    spans: list[tuple[int, int]] = []
    first: dict[str, int] = {}
    repeats: dict[int, int] = {}
    offset = 0
    with path.open("rb") as source:
        for raw in source:
            if raw.strip():
                custom_id = _custom_id(raw)
                if custom_id is not None:
                    seen = first.setdefault(custom_id, len(spans))
                    if seen != len(spans):
                        repeats[len(spans)] = seen
                spans.append((offset, len(raw)))
            offset += len(raw)
    return Plan(spans, repeats)


def _custom_id(raw: bytes) -> str | None:
    try:
        line = json.loads(raw)
    except ValueError:
        return None
    custom_id = line.get("custom_id") if isinstance(line, dict) else None
    return custom_id if isinstance(custom_id, str) else None


def read_spans(path: Path, spans: list[tuple[int, int]]) -> list[bytes]:
    """The lines at ``spans`` (blocking)."""
    with path.open("rb") as source:
        found = []
        for offset, length in spans:
            source.seek(offset)
            found.append(source.read(length))
        return found


def read_line(raw: bytes, urls: Collection[str]) -> LineRequest | Unsendable:
    """A line as a request to one of ``urls`` (a batch's endpoint, which every line must name), or why it cannot be
    sent."""
    try:
        line = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return Unsendable(None, INVALID_JSON, f"the line is not valid JSON: {exc}")
    if not isinstance(line, dict):
        return Unsendable(None, INVALID_JSON, "the line is not a JSON object")
    custom_id = line.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return Unsendable(None, INVALID_LINE, "the line has no custom_id (a non-empty string)")
    if line.get("method") != "POST":
        return Unsendable(custom_id, INVALID_LINE, f"method must be 'POST', not {line.get('method')!r}")
    url = line.get("url")
    if not isinstance(url, str) or url not in urls:
        return Unsendable(custom_id, INVALID_URL, f"url must be {' or '.join(sorted(urls))}, not {url!r}")
    if "body" not in line:
        return Unsendable(custom_id, INVALID_LINE, "the line has no body")
    return LineRequest(custom_id, url, line["body"])


def entry_id(batch_id: str, number: int) -> str:
    return _ids(batch_id, number)[0]


def _ids(batch_id: str, number: int) -> tuple[str, str]:
    digest = hashlib.sha256(f"{batch_id}:{number}".encode()).hexdigest()
    return f"batch_req_{digest[:32]}", f"req_{digest[32:]}"


def answered(batch_id: str, number: int, custom_id: str, status_code: int, body: Any) -> bytes:
    """The entry of a line the route answered: ``body`` a JSON value, or ``EncodedJson`` put in as it is."""
    entry_id, request_id = _ids(batch_id, number)
    if isinstance(body, EncodedJson):
        response = {"status_code": status_code, "request_id": request_id}
        head = _line({"id": entry_id, "custom_id": custom_id, "response": response})[: -len(b"}}\n")]
        return head + b',"body":' + body.content + b'},"error":null}\n'
    response = {"status_code": status_code, "request_id": request_id, "body": body}
    return _line({"id": entry_id, "custom_id": custom_id, "response": response, "error": None})


def unanswered(batch_id: str, number: int, custom_id: str | None, code: str, message: str) -> bytes:
    """The entry of a line that was not sent."""
    entry_id, _ = _ids(batch_id, number)
    error = {"code": code, "message": message}
    return _line({"id": entry_id, "custom_id": custom_id, "response": None, "error": error})


def _line(entry: dict[str, Any]) -> bytes:
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
