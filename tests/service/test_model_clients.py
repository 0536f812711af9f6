"""One model and the models by endpoint, as the ecosystem's clients ask for them: ``openai``'s ``models.retrieve``
(``GET /v1/models/{name}``), Cohere's ``models.get`` and ``models.list(endpoint=...)``; each model's card says which
of Cohere's endpoints it answers."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.service.apptools import real_server_for
from tests.service.tiny_models import TinyModel

openai = pytest.importorskip("openai")
cohere = pytest.importorskip("cohere")


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    tasks = ("text-classification", "rerank", "fill-mask", "question-answering")
    with real_server_for({task: tiny_models[task].bundle for task in tasks}, tune=False) as url:
        yield url


def test_openai_retrieve_and_the_card(server_url: str) -> None:
    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused")
    model = client.models.retrieve("rerank")
    listed = {item.id: item for item in client.models.list().data}
    assert (model.id, model.object, model.owned_by, model.created) == ("rerank", "model", "bertserve",
                                                                       listed["rerank"].created)  # fmt: skip
    card = httpx.get(f"{server_url}/v1/models/rerank").json()
    whole = {item["name"]: item for item in httpx.get(f"{server_url}/v1/models").json()["models"]}
    assert {key: value for key, value in card.items() if key in whole["rerank"]} == whole["rerank"]
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("nope")
    assert "no model named 'nope'" in str(missing.value)


def test_cohere_endpoints(server_url: str) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused")
    cards = {item["name"]: item["endpoints"] for item in httpx.get(f"{server_url}/v1/models").json()["models"]}
    assert cards == {"text-classification": ["classify"], "rerank": ["rerank"], "fill-mask": [],
                     "question-answering": []}  # fmt: skip
    assert [model.name for model in client.models.list(endpoint="classify").models] == ["text-classification"]
    assert [model.name for model in client.models.list(endpoint="rerank").models] == ["rerank"]
    assert client.models.list(endpoint="embed").models == []
    assert len(client.models.list().models) == 4
    assert client.models.get("rerank").endpoints == ["rerank"]
