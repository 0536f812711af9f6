"""The rerank handler against transformers: the same pairs tokenized the same way, scored by the same head."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from service.tasks import HANDLERS, InputError, RerankParams
from service.tasks.rerank import RelevanceScore, rank, relevance
from tests.service.tasks.conftest import MAX_LENGTH, TaskFixture, torch

QUERY = "Where does John Smith live?"
DOCUMENTS = [
    "John Smith lives in Paris and works for the United Nations in Geneva.",
    "The movie was wonderful, the actors were brilliant and the music was beautiful.",
    "  Café   naïve  résumé 東京 🙂 ",
    "paris",
    "A very long page " + "that keeps going and going about the river and the old city " * 12,
]
HEADS: dict[str, dict[str, Any]] = {
    "one_logit": {"num_labels": 1},
    "two_labels": {"id2label": {0: "not_relevant", 1: "relevant"}, "label2id": {"not_relevant": 0, "relevant": 1}},
}


@pytest.fixture(scope="module", params=list(HEADS))
def cross_encoder(request: pytest.FixtureRequest, make_task: Callable[..., TaskFixture]) -> TaskFixture:
    # The fixture's pipeline is unused (transformers has no rerank pipeline); its model and context are the point.
    return make_task("text-classification", "BertForSequenceClassification", **HEADS[request.param])


def oracle(fixture: TaskFixture, hf_tokenizer: Any, query: str, documents: list[str], side: str = "right") -> list:
    """transformers on each (query, document) pair, document truncated: (input ids, score, raw score) per pair."""
    answers = []
    hf_tokenizer.truncation_side = side
    try:
        for document in documents:
            pair = {"truncation": "only_second", "max_length": MAX_LENGTH, "return_tensors": "pt"}
            encoded = hf_tokenizer(query, document, **pair)
            with torch.no_grad():
                logits = fixture.model(**encoded).logits[0].double().numpy()
            if logits.shape[0] == 1:
                score, raw = 1 / (1 + np.exp(-logits[0])), logits[0]
            else:
                score, raw = np.exp(logits[1]) / np.exp(logits).sum(), logits[1] - logits[0]
            answers.append((encoded["input_ids"][0].tolist(), float(score), float(raw)))
    finally:
        hf_tokenizer.truncation_side = "right"
    return answers


@pytest.mark.parametrize("side", ["right", "left"])
def test_scores_match_transformers_on_the_same_pairs(cross_encoder: TaskFixture, hf_tokenizer: Any, side: str) -> None:
    handler = HANDLERS["rerank"]
    params = RerankParams(query=QUERY, truncation_direction=side)
    prepared = handler.prepare(cross_encoder.ctx, DOCUMENTS, params)
    ours = cross_encoder.run(handler, DOCUMENTS, params)
    theirs = oracle(cross_encoder, hf_tokenizer, QUERY, DOCUMENTS, side)
    assert len(ours) == len(theirs) == len(DOCUMENTS)
    for index, (item, row, (ids, score, raw)) in enumerate(zip(ours, prepared, theirs, strict=True)):
        assert row.sequences[0].input_ids.tolist() == ids, f"document {index}: different tokens"
        assert isinstance(item, RelevanceScore)
        assert abs(item.score - score) <= 1e-4, (index, item, score)
        assert abs(item.raw_score - raw) <= 1e-4, (index, item, raw)
    long_row = prepared[-1].sequences[0]
    assert len(long_row) == MAX_LENGTH  # the long document was cut, on its own side
    assert long_row.token_type_ids.tolist().count(0) == len(hf_tokenizer(QUERY)["input_ids"])  # the query is whole


def test_truncate_false_refuses_a_pair_too_long(cross_encoder: TaskFixture) -> None:
    handler = HANDLERS["rerank"]
    short = handler.prepare(cross_encoder.ctx, DOCUMENTS[:2], RerankParams(query=QUERY, truncate=False))
    assert len(short) == 2
    with pytest.raises(InputError, match="document 4 with the query is"):
        handler.prepare(cross_encoder.ctx, DOCUMENTS, RerankParams(query=QUERY, truncate=False))


def test_a_query_too_long_to_leave_room_is_refused(cross_encoder: TaskFixture) -> None:
    handler = HANDLERS["rerank"]
    words = len(cross_encoder.ctx.tokenizer.encode("the", add_special_tokens=False).ids)
    fits = "the " * (MAX_LENGTH - 3 - 1)  # one token left for the document
    assert words == 1
    (row,) = handler.prepare(cross_encoder.ctx, ["the long document"], RerankParams(query=fits))
    assert len(row.sequences[0]) == MAX_LENGTH
    for query in ("the " * (MAX_LENGTH - 3), "the " * 500):
        with pytest.raises(InputError, match="leaves no room for a document"):
            handler.prepare(cross_encoder.ctx, ["doc"], RerankParams(query=query))


@pytest.mark.parametrize(
    ("documents", "params", "message"),
    [
        (["a document"], RerankParams(query="   "), "query is empty"),
        (["a document", " "], RerankParams(query="q"), "document 1 is empty"),
        ([], RerankParams(query="q"), "no documents"),
        (["a document"], RerankParams(query="q", truncation_direction="middle"), "truncation_direction"),
    ],
)
def test_bad_inputs_are_input_errors(
    cross_encoder: TaskFixture, documents: list[str], params: RerankParams, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        HANDLERS["rerank"].prepare(cross_encoder.ctx, documents, params)


def test_rank_orders_best_first_keeps_ties_in_order_and_cuts_at_top_n() -> None:
    scores = [0.2, 0.9, 0.5, 0.9, 0.1]
    assert rank(scores) == [1, 3, 2, 0, 4]
    assert rank(scores, 2) == [1, 3]
    assert rank(scores, 10) == [1, 3, 2, 0, 4]
    assert rank([]) == []


def test_relevance_of_one_and_two_logits() -> None:
    one = relevance(np.array([2.0], dtype=np.float32))
    assert one.raw_score == 2.0 and abs(one.score - 1 / (1 + np.exp(-2.0))) < 1e-7
    two = relevance(np.array([0.5, 2.0], dtype=np.float32))
    assert abs(two.raw_score - 1.5) < 1e-7 and abs(two.score - 1 / (1 + np.exp(-1.5))) < 1e-7  # softmax == sigmoid
    with pytest.raises(ValueError, match="1 or 2 logits"):
        relevance(np.zeros(3, dtype=np.float32))
