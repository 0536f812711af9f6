from __future__ import annotations

from typing import Any

import pytest

from service.tasks import HANDLERS, InputError, TokenClassificationParams
from service.tasks.token_classification import STRATEGIES, default_stride
from tests.service.tasks.conftest import MAX_LENGTH, NER_LABELS, TaskFixture, assert_same

TEXTS = [
    "John Smith lives in Paris and works for the United Nations in Geneva.",
    "  Mary   Johnson visited London,\tBerlin and Rome!!  ",
    "Anna Maria moved from Madrid to 東京 in January 🙂 to study économics.",
    "Unbelievably, Geneva's bankers didn't care about the café's profits.",
]
LONG_TEXT = " ".join(TEXTS + TEXTS[::-1] + TEXTS)
WINDOWED = [LONG_TEXT, "Short text with Peter Miller.", LONG_TEXT[: len(LONG_TEXT) // 2]]


@pytest.fixture(scope="module")
def ner(make_task: Any) -> TaskFixture:
    id2label = dict(enumerate(NER_LABELS))
    return make_task(
        "token-classification",
        "BertForTokenClassification",
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )


def run_both(ner: TaskFixture, texts: list[str], params: TokenClassificationParams, stride: int | None) -> None:
    ours = ner.run(HANDLERS["token-classification"], texts, params)
    kwargs: dict[str, Any] = {"aggregation_strategy": params.aggregation_strategy}
    kwargs["ignore_labels"] = list(params.ignore_labels)
    if stride is not None:
        kwargs["stride"] = stride
    for text, result in zip(texts, ours, strict=True):
        assert_same(result, ner.pipeline(text, **kwargs))
        for entity in result:
            assert 0 <= entity["start"] <= entity["end"] <= len(text)


@pytest.mark.parametrize("ignore_labels", [("O",), ()], ids=["ignore-O", "keep-all"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_matches_pipeline(ner: TaskFixture, strategy: str, ignore_labels: tuple[str, ...]) -> None:
    params = TokenClassificationParams(aggregation_strategy=strategy, ignore_labels=ignore_labels)
    run_both(ner, TEXTS, params, stride=None)


@pytest.mark.parametrize("strategy", [s for s in STRATEGIES if s != "none"])
def test_long_text_with_stride_matches_pipeline(ner: TaskFixture, strategy: str) -> None:
    params = TokenClassificationParams(aggregation_strategy=strategy, ignore_labels=(), stride=8)
    run_both(ner, WINDOWED, params, stride=8)


@pytest.mark.parametrize("strategy", ["simple", "first", "max"])
def test_long_text_without_stride_is_windowed_with_the_default_stride(ner: TaskFixture, strategy: str) -> None:
    params = TokenClassificationParams(aggregation_strategy=strategy)
    (prepared,) = HANDLERS["token-classification"].prepare(ner.ctx, [LONG_TEXT], params)
    assert len(prepared.sequences) > 2
    assert all(len(sequence) <= MAX_LENGTH for sequence in prepared.sequences)
    run_both(ner, WINDOWED, params, stride=default_stride(MAX_LENGTH))


def test_long_text_without_aggregation_covers_every_token_once(ner: TaskFixture) -> None:
    params = TokenClassificationParams(aggregation_strategy="none", ignore_labels=())
    (result,) = ner.run(HANDLERS["token-classification"], [LONG_TEXT], params)
    whole = ner.ctx.tokenizer.encode(LONG_TEXT)
    assert len(whole.ids) > 3 * MAX_LENGTH
    assert [entity["index"] for entity in result] == list(range(1, len(whole.ids) - 1))
    for entity in result:
        assert (entity["start"], entity["end"]) == whole.offsets[entity["index"]]
    # the first window, short of its overlap with the second, is what the pipeline (which truncates) gives
    first = ner.pipeline(LONG_TEXT, aggregation_strategy="none", ignore_labels=[])
    unique = len(first) - default_stride(MAX_LENGTH)
    assert_same(result[:unique], first[:unique])


@pytest.mark.parametrize(
    ("texts", "params"),
    [
        ([""], TokenClassificationParams()),
        ([" \n "], TokenClassificationParams()),
        ([7], TokenClassificationParams()),
        (["text"], TokenClassificationParams(aggregation_strategy="longest")),
        (["text"], TokenClassificationParams(aggregation_strategy="none", stride=4)),
        (["text"], TokenClassificationParams(stride=MAX_LENGTH)),
        (["text"], TokenClassificationParams(stride=-1)),
    ],
)
def test_bad_inputs_are_input_errors(ner: TaskFixture, texts: list[Any], params: TokenClassificationParams) -> None:
    with pytest.raises(InputError):
        HANDLERS["token-classification"].prepare(ner.ctx, texts, params)
