"""Triton's classification extension through tritonclient's own ``InferRequestedOutput(..., class_count=K)`` (REST and
gRPC) against a real server: the classified ``score`` output is each text's K best classes as Triton writes them
(``"score:index:label"``, best first), equal to the v1 route's every-label answer; the other outputs stay what the
request asked for; what has no classes to rank is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.service.apptools import free_port, real_server_for
from tests.service.tiny_models import TinyModel

grpcclient = pytest.importorskip("tritonclient.grpc")
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = ["the movie was wonderful.", "a dull and far too long film", "paris"]


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, TinyModel]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The URL and a tritonclient module and client per protocol, of one server of a classifier and a NER model."""
    grpc_port = free_port()
    bundles = {"sst": tiny_models["text-classification"].bundle, "ner": tiny_models["token-classification"].bundle,
               "nli": tiny_models["zero-shot-classification"].bundle}  # fmt: skip
    with real_server_for(bundles, grpc_port=grpc_port, tune=False) as url:
        yield (
            url,
            {
                "http": (httpclient, httpclient.InferenceServerClient(url.removeprefix("http://"))),
                "grpc": (grpcclient, grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")),
            },
        )


def every_label(url: str) -> tuple[list[list[dict[str, Any]]], dict[str, int]]:
    """The v1 route's answer with every label (best first), and each label's class index from the model card."""
    answer = httpx.post(f"{url}/v1/text-classification", json={"model": "sst", "inputs": TEXTS, "top_k": None})
    (card,) = [model for model in httpx.get(f"{url}/v1/models").json()["models"] if model["name"] == "sst"]
    return answer.json()["results"], {label: index for index, label in enumerate(card["labels"])}


def infer(module: Any, client: Any, model: str, outputs: list[Any], **parameters: Any) -> Any:
    text = module.InferInput("text", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object))
    return client.infer(model, [text], outputs=outputs, parameters=parameters or None)


def strings(array: np.ndarray) -> list[list[str]]:
    return [[item.decode() for item in row] for row in array]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_class_count_answers_the_best_classes_as_triton_writes_them(
    served: tuple[str, dict[str, Any]], protocol: str
) -> None:
    url, clients = served
    module, client = clients[protocol]
    results, index = every_label(url)
    classes = len(index)
    assert classes >= 2

    def expected(count: int) -> list[list[str]]:
        return [
            [f"{item['score']:f}:{index[item['label']]}:{item['label']}" for item in row[:count]] for row in results
        ]

    answer = infer(module, client, "sst", [module.InferRequestedOutput("score", class_count=2),
                                           module.InferRequestedOutput("label")])  # fmt: skip
    assert answer.as_numpy("score").shape == (len(TEXTS), 2)
    assert strings(answer.as_numpy("score")) == expected(2)
    assert strings(answer.as_numpy("label")) == [[row[0]["label"]] for row in results]  # top_k's default: 1

    more = infer(module, client, "sst", [module.InferRequestedOutput("score", class_count=classes + 5)], top_k=2)
    assert strings(more.as_numpy("score")) == expected(classes)  # at most every class
    both = infer(module, client, "sst", [module.InferRequestedOutput("label"), module.InferRequestedOutput("score")],
                 top_k=2)  # fmt: skip
    assert both.as_numpy("score").dtype == np.float32 and both.as_numpy("score").shape == (len(TEXTS), 2)
    assert strings(both.as_numpy("label")) == [[item["label"] for item in row[:2]] for row in results]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_zero_shot_classes_are_the_request_labels_by_their_place(
    served: tuple[str, dict[str, Any]], protocol: str
) -> None:
    url, clients = served
    module, client = clients[protocol]
    labels = ["sports", "politics", "weather", "cooking"]
    body = {"model": "nli", "inputs": TEXTS, "candidate_labels": labels}
    v1 = httpx.post(f"{url}/v1/zero-shot-classification", json=body).json()["results"]
    candidates = module.InferInput("candidate_labels", [len(labels)], "BYTES")
    candidates.set_data_from_numpy(np.array([label.encode() for label in labels], dtype=object))
    text = module.InferInput("text", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object))
    answer = client.infer("nli", [text, candidates], outputs=[module.InferRequestedOutput("score", class_count=3),
                                                              module.InferRequestedOutput("label")])  # fmt: skip
    best = [zip(row["labels"][:3], row["scores"][:3], strict=True) for row in v1]
    expected = [[f"{score:f}:{labels.index(label)}:{label}" for label, score in row] for row in best]
    assert strings(answer.as_numpy("score")) == expected
    assert {label for row in expected for label in (item.split(":")[1] for item in row)} - {"0"}  # not all index 0
    assert strings(answer.as_numpy("label")) == [row["labels"] for row in v1]  # every label, as without classifying


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_classification_where_no_class_scores_are_is_refused(served: tuple[str, dict[str, Any]], protocol: str) -> None:
    _, clients = served
    module, client = clients[protocol]
    cases = [
        ("sst", [module.InferRequestedOutput("label", class_count=2)], "cannot be classified: classification ranks"),
        ("ner", [module.InferRequestedOutput("entities", class_count=2)], "a token-classification model's outputs"),
    ]
    for model, outputs, said in cases:
        with pytest.raises(InferenceServerException) as refused:
            infer(module, client, model, outputs)
        assert said in refused.value.message()
        assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")


def test_a_class_count_that_is_no_count_is_refused(served: tuple[str, dict[str, Any]]) -> None:
    url, _ = served
    tensor = {"name": "text", "shape": [1], "datatype": "BYTES", "data": ["fine"]}
    for count in (0, -1, "2", True):
        body = {"inputs": [tensor], "outputs": [{"name": "score", "parameters": {"classification": count}}]}
        answer = httpx.post(f"{url}/v2/models/sst/infer", json=body)
        assert answer.status_code == 400 and "class count" in answer.json()["error"]
