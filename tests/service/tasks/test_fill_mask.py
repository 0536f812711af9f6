from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from service.tasks import HANDLERS, FillMaskParams, InputError
from tests.service.tasks.conftest import TaskFixture, assert_same

TEXTS = [
    "John Smith lives in [MASK] and works for the United Nations.",
    "  The movie was [MASK],   the actors were brilliant!!  ",
    "Anna Maria moved from Madrid to 東京 in [MASK] 🙂 to study économics.",
    "[MASK] visited London, Berlin and [MASK] last summer.",
    "It's a small [MASK] near the station; they [MASK] coffee, tea and [MASK].",
]
PARAMS = [
    FillMaskParams(),
    FillMaskParams(top_k=1),
    FillMaskParams(top_k=12),
    FillMaskParams(targets=("paris", "london", "rome", "the")),
    FillMaskParams(top_k=2, targets=("paris", "london", "rome")),
    FillMaskParams(targets=("Paris", "unbelievably", "geneva", "paris", " ", "🙂")),
]


@pytest.fixture(scope="module")
def fill_mask(make_task: Any) -> TaskFixture:
    return make_task("fill-mask", "BertForMaskedLM")


def pipeline_kwargs(params: FillMaskParams) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"top_k": params.top_k}
    if params.targets is not None:
        kwargs["targets"] = list(params.targets)
    return kwargs


@pytest.mark.parametrize("params", PARAMS, ids=repr)
def test_matches_pipeline(fill_mask: TaskFixture, params: FillMaskParams) -> None:
    ours = fill_mask.run(HANDLERS["fill-mask"], TEXTS, params)
    for text, result in zip(TEXTS, ours, strict=True):
        theirs = fill_mask.pipeline(text, **pipeline_kwargs(params))
        assert_same(result, theirs if text.count("[MASK]") > 1 else [theirs])


def test_without_clean_up_tokenization_spaces_matches_a_tokenizer_that_does_not_set_it(fill_mask: TaskFixture) -> None:
    text = "Geneva's bankers didn't [MASK] about it ."
    uncleaned = copy.copy(fill_mask)
    uncleaned.ctx = replace(fill_mask.ctx, clean_up_tokenization_spaces=False)
    (ours,) = uncleaned.run(HANDLERS["fill-mask"], [text], FillMaskParams())
    (cleaned,) = fill_mask.run(HANDLERS["fill-mask"], [text], FillMaskParams())
    tokenizer = fill_mask.pipeline.tokenizer
    tokenizer.clean_up_tokenization_spaces = False
    try:
        theirs = fill_mask.pipeline(text)
    finally:
        tokenizer.clean_up_tokenization_spaces = True
    assert_same(ours, [theirs])
    assert " ' s" in ours[0][0]["sequence"]
    assert "'s" in cleaned[0][0]["sequence"] and " ' s" not in cleaned[0][0]["sequence"]


@pytest.mark.parametrize(
    ("texts", "params"),
    [
        (["no mask here"], FillMaskParams()),
        ([""], FillMaskParams()),
        ([None], FillMaskParams()),
        (["a [MASK]"], FillMaskParams(top_k=0)),
        (["a [MASK]"], FillMaskParams(targets=(" ", ""))),
        (["a [MASK] " + "word " * 80], FillMaskParams()),
    ],
)
def test_bad_inputs_are_input_errors(fill_mask: TaskFixture, texts: list[Any], params: FillMaskParams) -> None:
    with pytest.raises(InputError):
        HANDLERS["fill-mask"].prepare(fill_mask.ctx, texts, params)
