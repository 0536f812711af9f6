"""A bundle's request defaults (export --request-default): the parameters a model answers with when a request leaves
them out, overridden by a request that sends them, on every route of the task; listed in /v1/models."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.service.apptools import ready_app_client
from tests.service.tiny_models import TinyModel

pytest.importorskip("torch")

from model_export.__main__ import build_parser
from model_export.export import ExportError, export_bundle

TEXTS = ["John Smith lives in Paris and works for the United Nations.", "Mary visited Berlin, London and Rome."]


@pytest.fixture(scope="module")
def client(tiny_models: dict[str, TinyModel], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    checkpoint = tiny_models["token-classification"].checkpoint
    first = export_bundle(
        checkpoint, tmp_path_factory.mktemp("defaults") / "ner", request_defaults={"aggregation_strategy": "first"}
    )
    assert first.spec.request_defaults == {"aggregation_strategy": "first"}
    models = [f"ner-first={first.path}", f"ner={tiny_models['token-classification'].bundle}"]
    with ready_app_client(Settings(models=models, intra_op_threads=1, tune=False)) as test_client:  # type: ignore[call-arg]
        yield test_client


def entities(client: TestClient, model: str, **params: Any) -> list[Any]:
    response = client.post("/v1/token-classification", json={"model": model, "inputs": TEXTS, **params})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_a_left_out_parameter_takes_the_bundle_default(client: TestClient) -> None:
    plain_first = entities(client, "ner", aggregation_strategy="first")
    assert entities(client, "ner-first") == plain_first
    for strategy in ("none", "max", "average"):
        assert entities(client, "ner-first", aggregation_strategy=strategy) == entities(
            client, "ner", aggregation_strategy=strategy
        )
    # Sent at its documented default ("simple"), a field counts as left out: generated clients send every field.
    assert entities(client, "ner-first", aggregation_strategy="simple") == plain_first
    hf = client.post("/models/ner-first", json={"inputs": TEXTS[0]})
    assert hf.status_code == 200 and hf.json() == plain_first[0]
    listed = {card["name"]: card for card in client.get("/v1/models").json()["models"]}
    assert listed["ner-first"]["request_defaults"] == {"aggregation_strategy": "first"}
    assert listed["ner"]["request_defaults"] == {}


def test_words_take_the_text_only_fields_at_their_defaults(client: TestClient) -> None:
    words = ["John", "Smith", "lives", "in", "Paris", "."]
    plain = client.post("/v1/token-classification", json={"model": "ner", "words": words})
    every_field = {"model": "ner", "words": words, "inputs": None, "aggregation_strategy": "simple",
                   "ignore_labels": ["O"], "stride": None}  # fmt: skip
    sent = client.post("/v1/token-classification", json=every_field)
    assert plain.status_code == sent.status_code == 200 and plain.json() == sent.json()
    refused = client.post("/v1/token-classification", json={**every_field, "aggregation_strategy": "first"})
    assert refused.status_code == 422 and "aggregation_strategy: for texts only" in refused.text


def test_export_refuses_what_the_task_does_not_take(tiny_models: dict[str, TinyModel], tmp_path: Path) -> None:
    checkpoint = tiny_models["token-classification"].checkpoint
    with pytest.raises(ExportError, match=r"request defaults \['top_k'\] are not parameters of token-classification"):
        export_bundle(checkpoint, tmp_path / "a", request_defaults={"top_k": 3})
    with pytest.raises(ExportError, match="request default ignore_labels must be a string, number, boolean or null"):
        export_bundle(checkpoint, tmp_path / "b", request_defaults={"ignore_labels": ["O"]})


def test_the_cli_reads_name_value_pairs() -> None:
    args = build_parser().parse_args(
        ["ckpt", "out", "--request-default", "aggregation_strategy=first", "--request-default", "stride=16"]
    )
    assert dict(args.request_default) == {"aggregation_strategy": "first", "stride": 16}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["ckpt", "out", "--request-default", "nothing"])
