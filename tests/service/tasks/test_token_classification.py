from __future__ import annotations

from typing import Any

import pytest

from contract.word_decoding import default_stride
from service.tasks import HANDLERS, InputError, TokenClassificationParams, WordsInput
from service.tasks.token_classification import STRATEGIES
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


# ------------------------------------------------------------------------------------- pre-split words

WORD_LISTS = [
    ["John", "Smith", "lives", "in", "Paris", "and", "works", "for", "the", "United", "Nations", "."],
    ["Unbelievably", ",", "Geneva's", "bankers", "didn't", "care", "about", "the", "café's", "profits", "."],
    ["U.S.", "president", "Anna", "Maria", "moved", "to", "東京", "🙂", "in", "January"],
]
WORD_KEYS = {"entity", "score", "index", "word", "start", "end"}


def oracle_word_labels(ner: TaskFixture, words: list[str]) -> dict[int, tuple[str, float]]:
    """Independently of the handler: the transformers tokenizer's word ids and the torch model's logits give,
    per word whose first sub-token fits in one ``MAX_LENGTH`` row, the argmax label there and its probability."""
    torch = pytest.importorskip("torch")
    encoding = ner.pipeline.tokenizer(
        words, is_split_into_words=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt"
    )
    with torch.no_grad():
        probabilities = ner.model(**encoding).logits[0].softmax(-1)
    first: dict[int, int] = {}
    for position, word in enumerate(encoding.word_ids()):
        if word is not None:
            first.setdefault(word, position)
    return {
        word: (NER_LABELS[int(probabilities[position].argmax())], float(probabilities[position].max()))
        for word, position in first.items()
    }


def check_words_result(words: list[str], result: list[dict[str, Any]]) -> None:
    text = " ".join(words)
    assert [entity["index"] for entity in result] == list(range(len(words)))
    assert [entity["word"] for entity in result] == words
    for entity in result:
        assert set(entity) == WORD_KEYS
        assert entity["entity"] in NER_LABELS and isinstance(entity["score"], float) and 0 < entity["score"] <= 1
        assert text[entity["start"] : entity["end"]] == entity["word"]


def test_words_take_the_label_of_their_first_sub_token(ner: TaskFixture) -> None:
    handler = HANDLERS["token-classification"]
    inputs = [WordsInput(tuple(words)) for words in WORD_LISTS]
    prepared = handler.prepare(ner.ctx, inputs, TokenClassificationParams())
    for words, item in zip(WORD_LISTS, prepared, strict=True):
        (row,) = item.sequences
        assert row.input_ids.tolist() == ner.pipeline.tokenizer(words, is_split_into_words=True)["input_ids"]
    assert any(len(ner.ctx.tokenizer.encode(word, add_special_tokens=False).ids) > 1 for word in WORD_LISTS[1])
    results = ner.run(handler, inputs, TokenClassificationParams())
    for words, result in zip(WORD_LISTS, results, strict=True):
        check_words_result(words, result)
        expected = oracle_word_labels(ner, words)
        assert [entity["entity"] for entity in result] == [expected[index][0] for index in range(len(words))]
        for entity in result:
            assert entity["score"] == pytest.approx(expected[entity["index"]][1], abs=1e-5)
    first = results[0]
    assert (first[4]["start"], first[4]["end"]) == (len("John Smith lives in "), len("John Smith lives in Paris"))


def test_long_word_lists_are_windowed_and_every_word_is_labelled_once(ner: TaskFixture) -> None:
    words = LONG_TEXT.split()
    params = TokenClassificationParams()
    (prepared,) = HANDLERS["token-classification"].prepare(ner.ctx, [WordsInput(tuple(words))], params)
    assert len(prepared.sequences) > 2 and all(len(sequence) <= MAX_LENGTH for sequence in prepared.sequences)
    (result,) = ner.run(HANDLERS["token-classification"], [WordsInput(tuple(words))], params)
    check_words_result(words, result)
    # words whose first sub-token is only in the first window are labelled as the first row alone labels them
    expected = oracle_word_labels(ner, words)
    word_ids = ner.pipeline.tokenizer(words, is_split_into_words=True)["input_ids"]
    assert len(word_ids) > 3 * MAX_LENGTH
    first_window_only = MAX_LENGTH - 2 - default_stride(MAX_LENGTH)  # content tokens not shared with window 2
    encoding = ner.pipeline.tokenizer(words, is_split_into_words=True, truncation=True, max_length=MAX_LENGTH)
    checked = 0
    for position, word in enumerate(encoding.word_ids()):
        if word is None or position - 1 >= first_window_only or word in encoding.word_ids()[:position]:
            continue
        assert result[word]["entity"] == expected[word][0]
        assert result[word]["score"] == pytest.approx(expected[word][1], abs=1e-5)
        checked += 1
    assert checked > 10


def test_words_ignore_the_text_only_parameters(ner: TaskFixture) -> None:
    handler = HANDLERS["token-classification"]
    inputs = [WordsInput(tuple(words)) for words in WORD_LISTS]
    default = ner.run(handler, inputs, TokenClassificationParams())
    for params in (
        TokenClassificationParams(aggregation_strategy="none", ignore_labels=()),
        TokenClassificationParams(aggregation_strategy="max", ignore_labels=tuple(NER_LABELS)),
        TokenClassificationParams(aggregation_strategy="none", stride=4),  # a stride with "none" is fine for words
    ):
        assert ner.run(handler, inputs, params) == default


@pytest.mark.parametrize(
    ("inputs", "params"),
    [
        ([WordsInput(())], TokenClassificationParams()),
        ([WordsInput(("EU", ""))], TokenClassificationParams()),
        ([WordsInput(("EU", "  "))], TokenClassificationParams()),
        ([WordsInput(("EU", "\u200b"))], TokenClassificationParams()),  # a word without tokens cannot be labelled
        ([WordsInput(("EU", 5))], TokenClassificationParams()),  # type: ignore[arg-type]
        (["a text", WordsInput(("EU",))], TokenClassificationParams()),
        ([WordsInput(("EU",))], TokenClassificationParams(stride=MAX_LENGTH)),
        ([WordsInput(("EU",))], TokenClassificationParams(stride=-1)),
    ],
    ids=["no-words", "empty-word", "blank-word", "tokenless-word", "not-a-string", "mixed", "stride-big", "stride-neg"],
)
def test_bad_words_are_input_errors(ner: TaskFixture, inputs: list[Any], params: TokenClassificationParams) -> None:
    with pytest.raises(InputError):
        HANDLERS["token-classification"].prepare(ner.ctx, inputs, params)


def test_words_input_carries_its_text_for_the_engine() -> None:
    item = WordsInput(["EU", "rejects"])  # type: ignore[arg-type]
    assert item.words == ("EU", "rejects") and item.text == "EU rejects"
    assert item == WordsInput(("EU", "rejects"))
