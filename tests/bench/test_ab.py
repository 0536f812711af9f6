"""benchmarks.ab's --protocol: the same load in another protocol's shape asks the model for the same work."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from benchmarks.ab import protocol_requests
from service.oip import decode_inputs
from service.schemas.common import TaskRequest
from service.schemas.v2 import V2InferRequest
from service.tasks import LAYOUTS
from service.tasks.feature_extraction import EmbeddingsRequest, TeiEmbedRequest
from service.tasks.question_answering import QuestionAnsweringRequest
from service.tasks.rerank import RerankRequest, TeiRerankRequest
from service.tasks.text_classification import TextClassificationRequest
from service.tasks.token_classification import TokenClassificationRequest
from tests.minilm import minilm_folder, minilm_tokenizer

# a body of each load as benchmarks.loads.bertserve_loads writes it, its v1 request model and its model's task
LOADS: dict[str, tuple[dict[str, Any], type[TaskRequest], str]] = {
    "sst2": ({"model": "m", "inputs": "a fine film", "truncation": True}, TextClassificationRequest,
             "text-classification"),
    "squad": ({"model": "m", "inputs": {"question": "who?", "context": "anna lives in paris."}},
              QuestionAnsweringRequest, "question-answering"),
    "conll": ({"model": "m", "inputs": "john lives in paris."}, TokenClassificationRequest, "token-classification"),
    "embeddings": ({"model": "m", "input": ["a fine film", "a dull one"]}, EmbeddingsRequest, "feature-extraction"),
    "rerank": ({"model": "m", "query": "where?", "documents": ["in paris", "a film"]}, RerankRequest, "rerank"),
}  # fmt: skip


@pytest.mark.parametrize("task", sorted(LOADS))
def test_v2_bodies_carry_the_inputs_of_the_task_route(task: str) -> None:
    body, model, served_task = LOADS[task]
    path, (v2_body,) = protocol_requests(task, "v2", [body])
    assert path == "/v2/models/m/infer"
    infer = V2InferRequest.model_validate_json(json.dumps(v2_body))  # as the service parses it
    task_request = LAYOUTS[served_task].task_request(decode_inputs(infer, b""), {}, "m")
    assert task_request.to_task()[0] == model.model_validate(body).to_task()[0]


def test_tei_bodies_carry_the_inputs_of_the_task_route() -> None:
    for task, tei_model, tei_path in (
        ("embeddings", TeiEmbedRequest, "/embed"),
        ("rerank", TeiRerankRequest, "/rerank"),
    ):
        body, model, _ = LOADS[task]
        path, (tei_body,) = protocol_requests(task, "tei", [body])
        assert path == tei_path
        ours, theirs = tei_model.model_validate(tei_body).to_task(), model.model_validate(body).to_task()
        assert ours[0] == theirs[0]
    with pytest.raises(ValueError, match="no tei route for sst2"):
        protocol_requests("sst2", "tei", [LOADS["sst2"][0]])


def test_without_a_protocol_the_load_goes_to_its_own_route() -> None:
    body = LOADS["embeddings"][0]
    assert protocol_requests("embeddings", None, [body]) == ("/v1/embeddings", [body])


def test_a_long_load_sends_inputs_of_the_asked_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import big_models
    from benchmarks.ab import long_load

    folder = minilm_folder()  # holds tokenizer.json as a bundle does
    text = " ".join(
        f"The unbelievably picturesque town number {index} lies north of the river." for index in range(900)
    )
    monkeypatch.setattr(big_models, "wikitext_text", lambda: text)
    load = long_load("big", folder, 128)
    tokenizer = minilm_tokenizer()
    assert load.name == "tokens-128" and len(load.bodies) == big_models.INPUTS_PER_LENGTH
    lengths = {len(tokenizer.encode(body["inputs"]).ids) for body in load.bodies}
    assert min(lengths) >= 120 and max(lengths) <= 128
    assert {body["model"] for body in load.bodies} == {"big"}


def test_tokens_go_with_the_classification_load_only(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.ab import main

    with pytest.raises(SystemExit):
        main(["--model", "m=.", "--tree", "a=.", "--tree", "b=.", "--task", "squad", "--tokens", "128", "--out", "x"])
    assert "--tokens goes with the text-classification load" in capsys.readouterr().err


def test_a_named_load_of_the_task_is_the_one_sent(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.ab import main, task_load

    chosen = task_load(argparse.Namespace(task="embeddings", name="e", load="embeddings-32"))
    assert chosen.name == "embeddings-32" and chosen.sequences_per_request == 32
    assert task_load(argparse.Namespace(task="embeddings", name="e", load=None)).name == "embeddings-1"
    with pytest.raises(SystemExit):
        main(["--model", "e=.", "--tree", "a=.", "--tree", "b=.", "--task", "embeddings", "--load", "x", "--out", "x"])
    assert "--load x: the embeddings loads are embeddings-1, embeddings-32" in capsys.readouterr().err


def test_the_report_says_how_often_identical_trees_win_by_chance() -> None:
    from benchmarks.ab import markdown

    stats = {"median": 1.0, "min": 1.0, "max": 1.0, "cpu_ms_median": 1.0}
    summary = {"labels": ["base", "new"], "model": "m", "path": "/v1/x", "rounds": 3, "duration_s": 1, "warmup_s": 1,
               "server_args": "", "load_avg": {"start": [0], "end": [0]}, "trees": {"base": "a", "new": "b"},
               "verdict": [{"concurrency": 32, "trees": {"base": stats, "new": stats}, "ratio": 1.0,
                            "wins_beyond_spread": False, "loses_beyond_spread": False}]}  # fmt: skip
    assert "by chance 5.0 % of the time at 3 rounds" in markdown(summary)  # 1 / C(6, 3)
    assert "by chance 1.4 % of the time at 4 rounds" in markdown({**summary, "rounds": 4})  # 1 / C(8, 4)
