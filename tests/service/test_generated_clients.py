"""Clients generated from the served /openapi.json by the three common generators, used as a caller would.

Every run generates them from a real server's document (tiny models under the README's names) with each tool's
default settings, then:
- openapi-typescript + openapi-fetch and @hey-api/openapi-ts: the README's example and a program sending every
  request body in the README compile with ``tsc --strict`` (no cast, no ``any``, no non-null assertion, no ``??``)
  and run with node; their answers equal the server's to the same bodies.
- openapi-python-client: the README's example passes ``mypy --strict`` and runs; every README body goes through the
  generated functions and models and comes back equal to the server's JSON.
Node and the pinned npm packages (``generated_clients/package.json``) are installed by ``make test``.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.apptools import real_server_for
from tests.service.readme_examples import (
    ReadmeCall,
    hey_api_calls,
    openapi_fetch_calls,
    post_operation,
    readme_calls,
    readme_example,
    workarounds,
)
from tests.service.test_contract import tool_env, venv_tool
from tests.service.tiny_models import TinyModel

NODE_PROJECT = Path(__file__).parent / "generated_clients"
NODE_BIN = NODE_PROJECT / "node_modules" / ".bin"
README_MODELS = {  # the README's model names -> the tiny model's task
    "sentiment": "text-classification",
    "ner": "token-classification",
    "qa": "question-answering",
    "fill-mask": "fill-mask",
}
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    with real_server_for({name: tiny_models[task].bundle for name, task in README_MODELS.items()}, timeout_s=20) as url:
        yield url


@pytest.fixture(scope="module")
def document(server_url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{server_url}/openapi.json").json())


@pytest.fixture(scope="module")
def calls(document: dict[str, Any]) -> list[ReadmeCall]:
    found = readme_calls()
    routes = {post_operation(document, call.path).operation_id for call in found}
    assert {"textClassification", "tokenClassification", "questionAnswering", "fillMask"} <= routes
    return found


def server_answers(server_url: str, calls: list[ReadmeCall]) -> list[dict[str, Any]]:
    """What the server itself answers to each README body: ``{"data": ...}`` or ``{"error": ...}``."""
    answers = []
    for call in calls:
        response = httpx.post(f"{server_url}{call.path}", json=call.body, timeout=30)
        answers.append({"data" if response.status_code == 200 else "error": response.json()})
    return answers


def node_tool(name: str) -> str:
    tool = NODE_BIN / name
    if not tool.exists():
        pytest.fail(f"{tool} is missing: `make test` installs it (cd {NODE_PROJECT} && npm ci)")
    return str(tool)


def run(command: list[str], cwd: Path, **kwargs: Any) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout + done.stderr


def typescript_project(tmp_path: Path, document: dict[str, Any]) -> Path:
    (tmp_path / "openapi.json").write_text(json.dumps(document))
    (tmp_path / "node_modules").symlink_to(NODE_PROJECT / "node_modules")
    (tmp_path / "package.json").write_text('{"type": "module"}')
    tsconfig = {"extends": str(NODE_PROJECT / "tsconfig.json"), "include": ["**/*.ts"], "exclude": ["node_modules"]}
    (tmp_path / "tsconfig.json").write_text(json.dumps(tsconfig))
    return tmp_path


def generate_typescript(project: Path, tool: str, arguments: list[str]) -> None:
    said = run([node_tool(tool), *arguments], cwd=project)
    assert not re.search(r"warn|error", said, re.IGNORECASE), f"{tool} complained about the document:\n{said}"


def compile_and_run(project: Path, sources: dict[str, str], server_url: str, program: str) -> str:
    for name, code in sources.items():
        assert workarounds(code) == [], f"{name} needs a workaround: {workarounds(code)}"
        (project / name).write_text(code)
    run([node_tool("tsc"), "-p", str(project)], cwd=project)
    return run([node_tool("tsx"), program, server_url], cwd=project)


def printed_answers(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_openapi_typescript_and_openapi_fetch(
    server_url: str, document: dict[str, Any], calls: list[ReadmeCall], tmp_path: Path
) -> None:
    project = typescript_project(tmp_path, document)
    generate_typescript(project, "openapi-typescript", ["openapi.json", "-o", "schema.ts"])
    example = readme_example("openapi-fetch", server_url)
    sources = {"example.ts": example, "calls.ts": openapi_fetch_calls(calls, document)}

    assert printed_answers(compile_and_run(project, sources, server_url, "calls.ts")) == server_answers(
        server_url, calls
    )
    printed = run([node_tool("tsx"), "example.ts"], cwd=project).split()
    answer = httpx.post(f"{server_url}/v1/text-classification", json=example_body(example)).json()
    assert printed == [part for [best] in answer["results"] for part in (best["label"], f"{best['score']:.3f}")]


ALWAYS_SENT = """import createClient from "openapi-fetch";
import type { paths } from "./schema";

const client = createClient<paths>({ baseUrl: process.argv[2] });
const listed = await client.GET("/v1/models");
if (!listed.data) throw new Error("no model list");
for (const card of listed.data.models) {
  const fields = [card.name, card.task, card.labels.length, card.max_length, card.precision, card.ready];
  console.log(JSON.stringify({ data: [...fields, card.request_defaults, listed.data.data.length] }));
}
const health = await client.GET("/health/ready");
if (!health.data) throw new Error("not ready");
console.log(JSON.stringify({ data: health.data.models }));
"""


def test_openapi_fetch_reads_always_sent_fields_without_fallbacks(
    server_url: str, document: dict[str, Any], tmp_path: Path
) -> None:
    """Response fields the server always sends are required in the document: used bare, they compile."""
    project = typescript_project(tmp_path, document)
    generate_typescript(project, "openapi-typescript", ["openapi.json", "-o", "schema.ts"])
    printed = printed_answers(compile_and_run(project, {"listing.ts": ALWAYS_SENT}, server_url, "listing.ts"))

    listed = httpx.get(f"{server_url}/v1/models").json()
    fields = ("name", "task", "labels", "max_length", "precision", "ready", "request_defaults")
    cards = [[card[field] for field in fields] for card in listed["models"]]
    expected = [[*card[:2], len(card[2]), *card[3:], len(listed["data"])] for card in cards]
    assert printed == [{"data": card} for card in expected] + [
        {"data": httpx.get(f"{server_url}/health/ready").json()["models"]}
    ]


def test_hey_api_openapi_ts(server_url: str, document: dict[str, Any], calls: list[ReadmeCall], tmp_path: Path) -> None:
    project = typescript_project(tmp_path, document)
    generate_typescript(project, "openapi-ts", ["-i", "openapi.json", "-o", "sdk"])
    example = readme_example("hey-api", server_url).replace("./bertserve", "./sdk")
    sources = {"example.ts": example, "calls.ts": hey_api_calls(calls, document)}

    assert printed_answers(compile_and_run(project, sources, server_url, "calls.ts")) == server_answers(
        server_url, calls
    )
    printed = run([node_tool("tsx"), "example.ts"], cwd=project).split()
    answer = httpx.post(f"{server_url}/v1/question-answering", json=example_body(example)).json()
    fields = ("answer", "start", "end")
    assert printed == [str(best[field]) for [best] in answer["results"] for field in fields]


def example_body(code: str) -> dict[str, Any]:
    """The body object literal of a README TypeScript example, as JSON (its keys are plain identifiers)."""
    literal = re.search(r"body: (\{.*\}) ?,?\n", code)
    assert literal is not None, code
    return dict(json.loads(re.sub(r"([{,]\s*)(\w+):", r'\1"\2":', literal.group(1))))


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name.replace(" ", "")).replace("-", "_").lower()


@pytest.fixture(scope="module")
def python_client(document: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the generated package ``bertserve_client``."""
    folder = tmp_path_factory.mktemp("python-client")
    spec = folder / "openapi.json"
    spec.write_text(json.dumps(document))
    generate = [venv_tool("openapi-python-client"), "generate", "--path", str(spec), "--meta", "none"]
    said = run([*generate, "--output-path", str(folder / "bertserve_client")], folder, env=tool_env())
    assert "warning" not in said.lower(), said
    return folder


def test_openapi_python_client_readme_example(server_url: str, python_client: Path) -> None:
    example = readme_example("openapi-python-client", server_url)
    (python_client / "example.py").write_text(example)
    mypy = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--cache-dir", ".mypy"]
    run([*mypy, "example.py"], python_client)

    printed = run([sys.executable, "example.py"], python_client).splitlines()
    text = re.search(r'inputs="([^"]+)"', example)
    assert text is not None
    answer = httpx.post(f"{server_url}/v1/token-classification", json={"model": "ner", "inputs": text.group(1)}).json()
    fields = ("entity_group", "word", "start", "end")
    assert printed == [" ".join(str(entity[field]) for field in fields) for entity in answer["results"][0]]


def test_openapi_python_client_sends_every_readme_body(
    server_url: str, document: dict[str, Any], calls: list[ReadmeCall], python_client: Path
) -> None:
    """Each README body through the generated body model and function; the parsed answer equals the server's."""
    sys.path.insert(0, str(python_client))
    try:
        client = importlib.import_module("bertserve_client").Client(base_url=server_url)
        for call, expected in zip(calls, server_answers(server_url, calls), strict=True):
            operation = post_operation(document, call.path)
            tag = snake(document["paths"][operation.template]["post"]["tags"][0])
            module = importlib.import_module(f"bertserve_client.api.{tag}.{snake(operation.operation_id)}")
            body_type = typing.get_type_hints(module.sync_detailed)["body"]
            response = module.sync_detailed(client=client, body=body_type.from_dict(call.body), **operation.path_params)
            assert {"data" if response.status_code == 200 else "error": response.parsed.to_dict()} == expected
    finally:
        sys.path.remove(str(python_client))
        for name in [name for name in sys.modules if name.startswith("bertserve_client")]:
            del sys.modules[name]
