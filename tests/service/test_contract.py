"""Contract tests from the OpenAPI schema: a generated typed client, and a schemathesis run (~1 min, default run).

Both run against a real uvicorn server on a free port serving the tiny models.
Tools: openapi-python-client and schemathesis (dev tools, not service dependencies).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.apptools import real_server_for
from tests.service.tiny_models import SERVED_TASKS, TinyModel


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    """The server, in this process: fuzzed calls of POST /v2/logging set the root logger's level, put back after."""
    bundles = {task: model.bundle for task, model in tiny_models.items()}
    root = logging.getLogger()
    level = root.level
    try:
        with real_server_for(bundles, max_inputs_per_request=8, max_body_bytes=64 * 1024, timeout_s=20) as url:
            yield url
    finally:
        root.setLevel(level)


def venv_tool(name: str) -> str:
    """A dev-extra CLI, looked up beside this interpreter first: `make test` does not put .venv/bin on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return found


def tool_env() -> dict[str, str]:
    """openapi-python-client runs ruff on what it generates: the venv's bin must be on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_generated_typed_client_round_trips(server_url: str, tmp_path: Path) -> None:
    generator = venv_tool("openapi-python-client")
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(httpx.get(f"{server_url}/openapi.json").json()))
    package = tmp_path / "bertserve_client"
    subprocess.run(
        [generator, "generate", "--path", str(spec), "--output-path", str(package), "--meta", "none"],
        check=True,
        cwd=tmp_path,
        capture_output=True,
        env=tool_env(),
    )
    sys.path.insert(0, str(tmp_path))
    try:
        client_module = importlib.import_module("bertserve_client")
        models = importlib.import_module("bertserve_client.models")
        api = "bertserve_client.api"
        # Function modules are named by the operationIds (service.api.operation_ids), folders by the tags.
        list_models = importlib.import_module(f"{api}.models.list_models")
        classify = importlib.import_module(f"{api}.text_classification.text_classification")
        answer = importlib.import_module(f"{api}.question_answering.question_answering")
        entities = importlib.import_module(f"{api}.token_classification.token_classification")
        fill = importlib.import_module(f"{api}.fill_mask.fill_mask")
        rerank = importlib.import_module(f"{api}.rerank.rerank")
        tei_rerank = importlib.import_module(f"{api}.rerank.tei_rerank")
        zero_shot = importlib.import_module(f"{api}.zero_shot_classification.zero_shot_classification")
        client = client_module.Client(base_url=server_url)

        cards = list_models.sync(client=client)
        assert isinstance(cards, models.ModelsResponse) and len(cards.models) == len(SERVED_TASKS)

        labels = classify.sync(client=client, body=models.TextClassificationBody(inputs=["good", "bad"], top_k=2))
        assert isinstance(labels, models.TextClassificationResponse)
        assert [len(result) for result in labels.results] == [2, 2]
        assert all(isinstance(item, models.LabelScore) for item in labels.results[0])

        pair = models.QAPair(question="where does john live?", context="john lives in paris.")
        answers = answer.sync(client=client, body=models.QuestionAnsweringBody(inputs=pair))
        assert isinstance(answers, models.QuestionAnsweringResponse) and isinstance(answers.results[0][0].start, int)

        found = entities.sync(client=client, body=models.TokenClassificationBody(inputs="john lives in paris"))
        assert isinstance(found, models.TokenClassificationResponse) and len(found.results) == 1

        filled = fill.sync(client=client, body=models.FillMaskBody(inputs="the [MASK] was good.", top_k=2))
        assert isinstance(filled, models.FillMaskResponse) and len(filled.results[0][0]) == 2

        documents = ["paris is the capital of france.", "the movie was good.", "john lives in paris."]
        question = models.RerankBody(query="where is john?", documents=documents, top_n=2, return_documents=True)
        ranked = rerank.sync(client=client, body=question)
        assert isinstance(ranked, models.RerankResponse) and len(ranked.results) == 2
        assert all(isinstance(item, models.RerankResult) for item in ranked.results)
        assert all(documents[item.index] == item.document.text for item in ranked.results)
        tei = tei_rerank.sync(client=client, body=models.TeiRerankBody(query="paris", texts=documents))
        assert isinstance(tei, list) and sorted(item.index for item in tei) == [0, 1, 2]

        body = models.ZeroShotClassificationBody(inputs=["the movie was good."], candidate_labels=["film", "city"])
        labelled = zero_shot.sync(client=client, body=body)
        assert isinstance(labelled, models.ZeroShotClassificationResponse)
        assert isinstance(labelled.results[0], models.ZeroShotResult)
        assert sorted(labelled.results[0].labels) == ["city", "film"]

        missing = classify.sync(client=client, body=models.TextClassificationBody(inputs="x", model="nope"))
        assert isinstance(missing, models.ErrorResponse) and missing.error.type_ == "model_not_found"
    finally:
        sys.path.remove(str(tmp_path))


def test_api_conforms_to_its_openapi_schema(server_url: str, tmp_path: Path) -> None:
    """Every operation, schema-driven examples, coverage and fuzzing; all schemathesis checks but one.

    ``positive_data_acceptance`` is left out: inputs the schema allows can still be semantically
    invalid (a fill-mask text without [MASK], a question longer than ``max_seq_len``); those are
    documented 400 answers.
    """
    runner = venv_tool("schemathesis")
    result = subprocess.run(
        [
            runner, "run", f"{server_url}/openapi.json", "--checks", "all",
            "--exclude-checks", "positive_data_acceptance", "--max-examples", "10", "--seed", "1",
            "--max-time", "60", "--request-timeout", "20", "--report-dir", str(tmp_path),
        ],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:]
