from __future__ import annotations

from typing import Any

import pytest

from service.tasks import HANDLERS, ClassificationParams, InputError
from service.tasks.text_classification import default_function
from tests.service.tasks.conftest import MAX_LENGTH, TaskFixture, assert_same

LABELS = {0: "negative", 1: "neutral", 2: "positive"}
TEXTS: list[Any] = [
    "The movie was wonderful, the actors were brilliant.",
    "The film was terrible: a boring plot, awful acting!!",
    "  Café   naïve  résumé   ",
    "東京 is in japan 🙂",
    "tab\tand\nnew line   and ... punctuation?!",
    ("Where does Peter Miller work?", "He works at the university hospital in Boston."),
    ("Short premise.", "A much longer hypothesis " + "with many words " * 30),
    "A very long review " + "that keeps going and going " * 40,
]
MODELS: dict[str, dict[str, Any]] = {
    "single": {"id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}},
    "multi": {
        "id2label": LABELS,
        "label2id": {v: k for k, v in LABELS.items()},
        "problem_type": "multi_label_classification",
    },
    "regression": {"num_labels": 1, "problem_type": "regression"},
    "one_label": {"num_labels": 1},
}
PARAMS = [
    ClassificationParams(),
    ClassificationParams(top_k=None),
    ClassificationParams(top_k=2),
    ClassificationParams(top_k=None, function_to_apply="sigmoid"),
    ClassificationParams(top_k=None, function_to_apply="none"),
    ClassificationParams(top_k=3, function_to_apply="softmax"),
]


@pytest.fixture(scope="module", params=list(MODELS))
def classifier(request: pytest.FixtureRequest, make_task: Any) -> TaskFixture:
    return make_task("text-classification", "BertForSequenceClassification", **MODELS[request.param])


def pipeline_input(item: Any) -> Any:
    return {"text": item[0], "text_pair": item[1]} if isinstance(item, tuple) else item


@pytest.mark.parametrize("params", PARAMS, ids=repr)
def test_matches_pipeline(classifier: TaskFixture, params: ClassificationParams) -> None:
    handler = HANDLERS["text-classification"]
    ours = classifier.run(handler, TEXTS, params)
    for item, result in zip(TEXTS, ours, strict=True):
        kwargs: dict[str, Any] = {"top_k": params.top_k, "truncation": True}
        if params.function_to_apply is not None:
            kwargs["function_to_apply"] = params.function_to_apply
        assert_same(result, classifier.pipeline(pipeline_input(item), **kwargs))


def test_default_function_follows_problem_type(classifier: TaskFixture) -> None:
    config = classifier.model.config
    expected = {"regression": "none", "multi_label_classification": "sigmoid"}.get(config.problem_type)
    expected = expected or ("sigmoid" if config.num_labels == 1 else "softmax")
    assert default_function(classifier.ctx) == expected


def test_long_inputs_are_truncated_to_max_length(classifier: TaskFixture) -> None:
    prepared = HANDLERS["text-classification"].prepare(classifier.ctx, TEXTS[-2:], ClassificationParams())
    assert [len(item.sequences) for item in prepared] == [1, 1]
    assert all(len(item.sequences[0]) == MAX_LENGTH for item in prepared)


@pytest.mark.parametrize(
    ("inputs", "params"),
    [
        ([""], ClassificationParams()),
        (["   "], ClassificationParams()),
        ([("text", "")], ClassificationParams()),
        ([42], ClassificationParams()),
        (["fine"], ClassificationParams(top_k=0)),
        (["fine"], ClassificationParams(function_to_apply="tanh")),
    ],
)
def test_bad_inputs_are_input_errors(classifier: TaskFixture, inputs: list[Any], params: ClassificationParams) -> None:
    with pytest.raises(InputError):
        HANDLERS["text-classification"].prepare(classifier.ctx, inputs, params)
