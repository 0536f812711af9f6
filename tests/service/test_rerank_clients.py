"""Rerank through Cohere's own clients: ``cohere.Client.rerank`` (v1, ``/v1/rerank``) and ``cohere.ClientV2.rerank``
(``/v2/rerank``) against a real server, both ordering the documents as TEI's ``/rerank`` does with its scores; the
Open Inference Protocol's ``/v2`` routes answer beside them. And CORS: an allowed origin's preflight and call are
answered with its header, another origin's are not."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import yaml

from service.settings import Settings
from tests.service.apptools import ready_app_client, real_server_for
from tests.service.tiny_models import TinyModel

cohere = pytest.importorskip("cohere")

QUERY = "where does john smith live?"
DOCUMENTS = [
    "the movie was wonderful, the actors were brilliant.",
    "john smith lives in paris and works for the united nations.",
    "paris",
    "the team won the game in extra time",
]


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    with real_server_for({"rerank": tiny_models["rerank"].bundle}, tune=False) as url:
        yield url


def tei_ranking(url: str) -> list[tuple[int, float]]:
    response = httpx.post(f"{url}/rerank", json={"query": QUERY, "texts": DOCUMENTS}, timeout=30)
    assert response.status_code == 200, response.text
    return [(item["index"], item["score"]) for item in response.json()]


def test_cohere_v2_client(server_url: str) -> None:
    client = cohere.ClientV2(base_url=server_url, api_key="unused")
    answer = client.rerank(model="rerank", query=QUERY, documents=DOCUMENTS, top_n=3)
    assert answer.id
    assert [(item.index, item.relevance_score) for item in answer.results] == tei_ranking(server_url)[:3]
    with pytest.raises(cohere.core.api_error.ApiError) as caught:
        client.rerank(model="nope", query=QUERY, documents=DOCUMENTS)
    assert caught.value.status_code == 404
    assert httpx.get(f"{server_url}/v2/health/live").json() == {"live": True}


def test_cohere_v1_client(server_url: str) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused")
    answer = client.rerank(model="rerank", query=QUERY, documents=DOCUMENTS, return_documents=True)
    assert [(item.index, item.relevance_score) for item in answer.results] == tei_ranking(server_url)
    assert [item.document.text for item in answer.results] == [DOCUMENTS[item.index] for item in answer.results]


def test_cors_answers_allowed_origins_only(tiny_models: dict[str, TinyModel]) -> None:
    settings = Settings(  # type: ignore[call-arg]
        models=[f"sst={tiny_models['text-classification'].bundle}"],
        cors_allow_origins=["https://app.example"],
        api_keys=["secret"],
        tune=False,
    )
    preflight = {
        "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type",
    }  # fmt: skip
    with ready_app_client(settings) as client:
        allowed = client.options("/v1/text-classification", headers={"Origin": "https://app.example", **preflight})
        refused = client.options("/v1/text-classification", headers={"Origin": "https://evil.example", **preflight})
        body = {"inputs": "a fine film"}
        call = client.post("/v1/text-classification", json=body, headers={"Origin": "https://app.example"})
        keyed = client.post(
            "/v1/text-classification",
            json=body,
            headers={"Origin": "https://app.example", "Authorization": "Bearer secret"},
        )
        other = client.post(
            "/v1/text-classification",
            json=body,
            headers={"Origin": "https://evil.example", "Authorization": "Bearer secret"},
        )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    assert call.status_code == 401  # the key still applies to the call itself
    assert keyed.status_code == 200 and keyed.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-origin" not in other.headers


def test_cohere_v2_cuts_each_document_at_max_tokens_per_doc(server_url: str) -> None:
    """A document cut at N tokens scores as the text those N tokens cover, sent whole."""
    client = cohere.ClientV2(base_url=server_url, api_key="unused")
    document = DOCUMENTS[1]
    spans = httpx.post(f"{server_url}/tokenize", json={"inputs": document, "add_special_tokens": False}).json()[0]
    cut = [token["stop"] for token in spans if token["stop"] < len(document) and document[token["stop"]] == " "][1]
    words = len([token for token in spans if token["stop"] <= cut])  # the tokens of the first two words

    def scores(documents: list[str], **options: int) -> list[float]:
        answer = client.rerank(model="rerank", query=QUERY, documents=documents, **options)
        return [item.relevance_score for item in sorted(answer.results, key=lambda item: item.index)]

    capped = scores([document, "paris"], max_tokens_per_doc=words)
    assert capped == scores([document[:cut], "paris"])
    assert capped[0] != scores([document])[0] and capped[1] == scores(["paris"])[0]


def test_cohere_v1_document_objects_and_rank_fields(server_url: str) -> None:
    client = cohere.Client(base_url=server_url, api_key="unused")
    objects = [{"text": text, "title": f"doc {index}"} for index, text in enumerate(DOCUMENTS)]
    answer = client.rerank(model="rerank", query=QUERY, documents=objects, rank_fields=["text"], return_documents=True)
    assert [(item.index, item.relevance_score) for item in answer.results] == tei_ranking(server_url)
    assert [item.document.text for item in answer.results] == [DOCUMENTS[item.index] for item in answer.results]
    echoed = httpx.post(
        f"{server_url}/v1/rerank", json={"query": QUERY, "documents": objects, "return_documents": True}
    )
    assert [item["document"] for item in echoed.json()["results"]] == [
        objects[item["index"]] for item in echoed.json()["results"]
    ]


def test_cohere_v1_rank_fields_score_the_fields_as_cohere_structured_yaml(server_url: str) -> None:
    """More fields than text: each document scores as Cohere's recommended YAML string of those fields, in order."""
    client = cohere.Client(base_url=server_url, api_key="unused")
    objects = [{"text": text, "title": f"paris {index}", "author": "smith"} for index, text in enumerate(DOCUMENTS)]

    def scores(documents: list, **options: object) -> list[float]:
        answer = client.rerank(model="rerank", query=QUERY, documents=documents, **options)
        return [item.relevance_score for item in sorted(answer.results, key=lambda item: item.index)]

    for fields in (["title", "text"], ["text", "title"], ["author"]):
        as_yaml = [yaml.dump({name: item[name] for name in fields}, sort_keys=False) for item in objects]
        assert scores(objects, rank_fields=fields) == scores(as_yaml), fields
    assert scores(objects, rank_fields=["title", "text"]) != scores(objects)
    with pytest.raises(cohere.errors.UnprocessableEntityError) as missing:
        client.rerank(model="rerank", query=QUERY, documents=[*objects, "plain text"], rank_fields=["title"])
    assert "documents[4] has no field 'title' named in rank_fields" in str(missing.value.body)
    with pytest.raises(cohere.errors.UnprocessableEntityError) as twice:
        client.rerank(model="rerank", query=QUERY, documents=objects, rank_fields=["text", "text"])
    assert "each field may be named once" in str(twice.value.body)


def test_cohere_v1_max_chunks_per_doc_scores_a_long_document_by_its_best_window(server_url: str) -> None:
    """Windows of what fits beside the query, each scored as a document of its own text; the best one counts."""
    client = cohere.Client(base_url=server_url, api_key="unused")
    query = "where does john smith live?"
    tokens = httpx.post(f"{server_url}/tokenize", json={"inputs": query, "add_special_tokens": False}).json()[0]
    longest = httpx.get(f"{server_url}/info", params={"model": "rerank"}).json()["max_input_length"]
    room = longest - len(tokens) - 3  # the model's length less the query and [CLS] q [SEP] d [SEP]
    filler = " ".join(["the team won the game in time"] * 40)  # words of one token each: windows cut between words
    document = f"{filler} john smith lives in paris and works for the united nations."
    spans = httpx.post(f"{server_url}/tokenize", json={"inputs": document, "add_special_tokens": False}).json()[0]
    windows = [document[spans[start]["start"] : spans[min(start + room, len(spans)) - 1]["stop"]]
               for start in range(0, len(spans), room)]  # fmt: skip
    assert len(windows) >= 3
    assert all(document[span["stop"] : span["stop"] + 1] in (" ", "") for span in spans[: len(spans) - 20])

    def score(documents: list[str], **options: int) -> float:
        return client.rerank(model="rerank", query=query, documents=documents, **options).results[0].relevance_score

    separately = [score([window]) for window in windows]
    assert score([document], max_chunks_per_doc=10) == pytest.approx(max(separately), abs=1e-6)
    assert score([document], max_chunks_per_doc=1) == pytest.approx(separately[0], abs=1e-6) == score([document])
    assert score([document], max_chunks_per_doc=2) == pytest.approx(max(separately[:2]), abs=1e-6)
