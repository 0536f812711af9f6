"""What the README shows a caller: its curl request bodies and its marked client examples, as test material.

A curl example is ``curl -s localhost:8000/PATH ... -d 'JSON'`` (continued lines included); a client example is the
fenced block right after an ``<!-- example: NAME -->`` line. ``README_URL`` is the address every example uses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[2] / "README.md"
README_URL = "http://localhost:8000"
CURL = re.compile(r"curl -s localhost:8000(?P<path>/\S+)(?:(?!curl |```).)*?-d '(?P<body>[^']*)'", re.DOTALL)
EXAMPLE = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\n```\w+\n(?P<code>.*?)\n```", re.DOTALL)


@dataclass(frozen=True)
class ReadmeCall:
    path: str  # the concrete path, e.g. /v2/models/sentiment/infer
    body: dict[str, Any]


@dataclass(frozen=True)
class Operation:
    template: str  # the document's path, e.g. /v2/models/{name}/infer
    operation_id: str
    path_params: dict[str, str]


def readme_calls() -> list[ReadmeCall]:
    return [ReadmeCall(found["path"], json.loads(found["body"])) for found in CURL.finditer(README.read_text())]


def readme_example(name: str, base_url: str) -> str:
    """The example's code, pointed at ``base_url``."""
    for found in EXAMPLE.finditer(README.read_text()):
        if found["name"] == name:
            return found["code"].replace(README_URL, base_url)
    raise LookupError(f"README has no example named {name!r}")


def post_operation(document: dict[str, Any], path: str) -> Operation:
    """The document's POST operation that ``path`` falls under, with its path parameters' values."""
    for template, operations in document["paths"].items():
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template))
        found = re.fullmatch(pattern, path)
        if found and "post" in operations:
            return Operation(template, operations["post"]["operationId"], found.groupdict())
    raise LookupError(f"no POST operation in the document serves {path}")


def openapi_fetch_calls(calls: list[ReadmeCall], document: dict[str, Any]) -> str:
    """A program that sends each body with openapi-fetch, printing one JSON line of ``{data, error}`` per call."""
    header = [
        'import createClient from "openapi-fetch";', 'import type { paths } from "./schema";', "",
        "const client = createClient<paths>({ baseUrl: process.argv[2] });",
    ]  # fmt: skip

    def send(operation: Operation) -> str:
        params = f"params: {{ path: {json.dumps(operation.path_params)} }}, " if operation.path_params else ""
        return f"client.POST({json.dumps(operation.template)}, {{ {params}"

    return _program(header, send, calls, document)


def hey_api_calls(calls: list[ReadmeCall], document: dict[str, Any]) -> str:
    """The same program through @hey-api/openapi-ts's functions, named by operationId (generated into ./sdk)."""
    functions = sorted({post_operation(document, call.path).operation_id for call in calls})
    header = [
        'import { createClient } from "./sdk/client";', f'import {{ {", ".join(functions)} }} from "./sdk";', "",
        "const client = createClient({ baseUrl: process.argv[2] });",
    ]  # fmt: skip

    def send(operation: Operation) -> str:
        path = f"path: {json.dumps(operation.path_params)}, " if operation.path_params else ""
        return f"{operation.operation_id}({{ client, {path}"

    return _program(header, send, calls, document)


def _program(
    header: list[str], send: Callable[[Operation], str], calls: list[ReadmeCall], document: dict[str, Any]
) -> str:
    """``header``, then per call ``const callN = await <send(operation)> body: ...})`` and its printed answer."""
    lines = list(header)
    for number, call in enumerate(calls):
        lines.append(f"const call{number} = await {send(post_operation(document, call.path))}")
        lines.append(f"  body: {json.dumps(call.body)} }});")
        lines.append(f"console.log(JSON.stringify({{ data: call{number}.data, error: call{number}.error }}));")
    return "\n".join(lines) + "\n"


# What a caller's code would need to get past the compiler: a cast, any, or a non-null assertion (`x!.y`, `x!)`).
WORKAROUND = re.compile(r"\bas\s+(?!const\b)[A-Za-z{\[]|\bany\b|\w[!]\s*[.)\[;,]|\?\?")


def workarounds(code: str) -> list[str]:
    """The lines of ``code`` that hold a cast, ``any``, a non-null assertion or a ``??`` fallback."""
    return [line for line in code.splitlines() if WORKAROUND.search(line) and not line.lstrip().startswith("//")]
