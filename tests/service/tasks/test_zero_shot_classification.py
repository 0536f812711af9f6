"""The zero-shot handler against transformers 4.57.6's zero-shot-classification pipeline on tiny NLI models."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from service.tasks import HANDLERS, InputError, ZeroShotParams
from service.tasks.zero_shot_classification import MAX_CANDIDATE_LABELS, hypotheses, parse_labels, pipeline_softmax
from tests.service.tasks.conftest import TaskFixture, assert_same

SEQUENCES = [
    "The movie was wonderful, the actors were brilliant and the music was beautiful.",
    "John Smith lives in Paris and works for the United Nations in Geneva.",
    "  Café   naïve  résumé 東京 🙂 ",
    "A very long review " + "that keeps going and going about the plot and the music " * 12,
]
LABELS = ["film", "city", "music", "politics", "family"]
# The pipeline finds the entailment label by name; heads with it first, last and in the middle.
HEADS: dict[str, list[str]] = {
    "mnli": ["contradiction", "neutral", "entailment"],
    "entailment_first": ["ENTAILMENT", "neutral", "contradiction"],
    "two_way": ["not_entailment", "Entailment"],
}
CASES: list[tuple[Any, dict[str, Any]]] = [
    (LABELS, {}),
    (LABELS, {"multi_label": True}),
    (["film"], {}),  # one label: scored on its own, as with multi_label
    ("film, city ,, music,", {}),  # a string is split on commas
    (LABELS[:3], {"hypothesis_template": "This text is about {}."}),
    (LABELS[:3], {"hypothesis_template": "{0}, it is.", "multi_label": True}),
]


@pytest.fixture(scope="module", params=list(HEADS))
def nli(request: pytest.FixtureRequest, make_task: Callable[..., TaskFixture]) -> TaskFixture:
    labels = HEADS[request.param]
    return make_task(
        "zero-shot-classification",
        "BertForSequenceClassification",
        id2label=dict(enumerate(labels)),
        label2id={label: index for index, label in enumerate(labels)},
    )


@pytest.mark.parametrize(("candidate_labels", "options"), CASES, ids=str)
def test_answers_match_the_pipeline(nli: TaskFixture, candidate_labels: Any, options: dict[str, Any]) -> None:
    labels = candidate_labels if isinstance(candidate_labels, str) else tuple(candidate_labels)
    params = ZeroShotParams(candidate_labels=labels, **options)
    ours = nli.run(HANDLERS["zero-shot-classification"], SEQUENCES, params)
    theirs = nli.pipeline(SEQUENCES, candidate_labels=candidate_labels, **options)
    assert_same(ours, theirs)


def test_a_single_sequence_matches_too(nli: TaskFixture) -> None:
    ours = nli.run(HANDLERS["zero-shot-classification"], [SEQUENCES[0]], ZeroShotParams(candidate_labels="film,city"))
    assert_same(ours[0], nli.pipeline(SEQUENCES[0], candidate_labels="film,city"))


def test_every_pair_of_a_request_is_prepared_at_once(nli: TaskFixture, hf_tokenizer: Any) -> None:
    params = ZeroShotParams(candidate_labels=tuple(LABELS[:3]))
    prepared = HANDLERS["zero-shot-classification"].prepare(nli.ctx, SEQUENCES, params)
    assert [len(item.sequences) for item in prepared] == [3] * len(SEQUENCES)
    for sequence, item in zip(SEQUENCES, prepared, strict=True):
        for label, row in zip(LABELS[:3], item.sequences, strict=True):
            expected = hf_tokenizer(sequence, f"This example is {label}.", truncation="only_first")["input_ids"]
            assert row.input_ids.tolist() == expected  # long premises cut, the hypothesis whole


def test_label_parsing_follows_the_pipeline() -> None:
    assert parse_labels(" a, b ,,c ,") == ["a", "b", "c"]
    assert parse_labels(("a, b", " c ")) == ["a, b", " c "]  # a list is taken as it is
    for empty in ("", " , ,", ()):
        with pytest.raises(InputError, match="candidate_labels is empty"):
            parse_labels(empty)
    with pytest.raises(InputError, match="limit"):
        parse_labels(",".join(f"label{i}" for i in range(MAX_CANDIDATE_LABELS + 1)))


def test_templates_take_plain_fields_only() -> None:
    assert hypotheses("This example is {}.", ["x", "y"]) == ["This example is x.", "This example is y."]
    assert hypotheses("{0} or {0}? {{literal}}", ["x"]) == ["x or x? {literal}"]
    for template, message in [
        ("No field here.", "no {} where the label goes"),
        ("{{}} escaped only", "no {} where the label goes"),
        ("{:>100000000}", "only hold {} fields"),
        ("{0.__class__}", "only hold {} fields"),
        ("{!r}", "only hold {} fields"),
        ("{name}", "only hold {} fields"),
        ("unbalanced {", "not a format string"),
        ("{} and {}", "cannot be formatted"),
        ("{} and {0}", "cannot be formatted"),
    ]:
        with pytest.raises(InputError, match=message.replace("{", r"\{").replace("}", r"\}")):
            hypotheses(template, ["x"])


def test_bad_requests_are_input_errors(nli: TaskFixture) -> None:
    handler = HANDLERS["zero-shot-classification"]
    with pytest.raises(InputError, match="sequence is empty"):
        handler.prepare(nli.ctx, ["fine", "  "], ZeroShotParams(candidate_labels=("a",)))
    long_label = "word " * 100  # the hypothesis alone does not fit; it is never truncated
    with pytest.raises(InputError, match="cannot tokenize"):
        handler.prepare(nli.ctx, ["fine"], ZeroShotParams(candidate_labels=(long_label,)))


def test_scores_are_the_pipelines_bit_for_bit_and_finite_where_it_overflows() -> None:
    logits = np.array([[2.5, -1.0], [30.0, 3.0], [0.1, 0.2]], dtype=np.float32)
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # the pipeline's formula
    assert np.array_equal(pipeline_softmax(logits), expected)
    huge = pipeline_softmax(np.array([1000.0, 0.0], dtype=np.float32))
    assert np.isfinite(huge).all() and huge.tolist() == [1.0, 0.0]
    tiny = pipeline_softmax(np.array([-1000.0, -1001.0], dtype=np.float32))
    assert np.isfinite(tiny).all() and abs(tiny.sum() - 1) < 1e-6
