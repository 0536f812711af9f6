"""The shared decode path (contract.decoding) on the real MiniLM WordPiece tokenizer and hand-made logits.

No model runs here: logits are built so that the expected answer is known (a label per token position,
one peak per window). The handlers' parity with transformers is tested in tests/service/tasks.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Encoding, Tokenizer

from contract.decoding import (
    DecodeInputError,
    QAWindows,
    check_room_for_context,
    decode_qa_answers,
    encode_question_contexts,
    resolve_window,
    select_window_spans,
    windowing_tokenizer,
)
from contract.word_decoding import encode_word_lists, label_words, word_spans
from tests.minilm import minilm_tokenizer

REPO = Path(__file__).resolve().parents[2]
# multi-piece words (unbelievably, Schwarzenegger), punctuation inside a word (U.S.) and on its own (.)
WORDS = ["EU", "rejects", "German", "call", "to", "boycott", "U.S.", "unbelievably", "Schwarzenegger", "lamb", "."]


@pytest.fixture(scope="module")
def base() -> Tokenizer:
    return minilm_tokenizer()


def first_sub_tokens(encoding: Encoding) -> dict[int, int]:
    """word index -> token index of its first sub-token, read off an unwindowed encoding."""
    first: dict[int, int] = {}
    for index, word in enumerate(encoding.word_ids):
        if word is not None:
            first.setdefault(word, index)
    return first


def one_hot_logits(length: int, labels: int, hot: list[int], value: float = 10.0) -> np.ndarray:
    logits = np.zeros((length, labels), dtype=np.float32)
    logits[np.arange(length), hot] = value
    return logits


def test_imports_without_torch_or_service() -> None:
    code = "import contract.decoding, sys; assert not {'torch', 'service', 'onnxruntime'} & set(sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_word_spans_point_into_the_joined_text() -> None:
    text = " ".join(WORDS)
    spans = word_spans(WORDS)
    assert spans[:3] == [(0, 2), (3, 10), (11, 17)]
    assert [text[start:end] for start, end in spans] == WORDS
    assert spans[-1][1] == len(text)
    assert word_spans(["a", " b", "c "]) == [(0, 1), (2, 4), (5, 7)]  # words keep their own spaces


def test_each_word_takes_the_label_of_its_first_sub_token(base: Tokenizer) -> None:
    encoded = encode_word_lists(windowing_tokenizer(base, 128, 32), [WORDS])[0]
    (window,) = encoded.windows
    whole = base.encode(WORDS, is_pretokenized=True)
    assert window.ids == whole.ids
    first = first_sub_tokens(whole)
    tokens_per_word = [whole.word_ids.count(index) for index in range(len(WORDS))]
    assert tokens_per_word[WORDS.index("U.S.")] == 4 and tokens_per_word[WORDS.index("Schwarzenegger")] > 1
    assert [whole.tokens[first[index]] for index in (6, 7, 8)] == ["u", "un", "schwarz"]
    assert encoded.label_tokens == [(0, first[index]) for index in range(len(WORDS))]

    length = len(window.ids)
    # every token's argmax is its own position: a word's label names the token it was read from
    labels = label_words(encoded, [one_hot_logits(length, length, list(range(length)))], {})
    expected_score = math.exp(10.0) / (math.exp(10.0) + length - 1)
    assert [entity["entity"] for entity in labels] == [f"LABEL_{first[index]}" for index in range(len(WORDS))]
    text = " ".join(WORDS)
    for index, (entity, word) in enumerate(zip(labels, WORDS, strict=True)):
        assert set(entity) == {"entity", "score", "index", "word", "start", "end"}
        assert entity["index"] == index and entity["word"] == word
        assert text[entity["start"] : entity["end"]] == word
        assert isinstance(entity["score"], float) and entity["score"] == pytest.approx(expected_score, rel=1e-5)


def test_labels_use_id2label_and_the_softmax_of_the_first_sub_token(base: Tokenizer) -> None:
    encoded = encode_word_lists(windowing_tokenizer(base, 128, 32), [["Schwarzenegger", "rejects"]])[0]
    (window,) = encoded.windows
    logits = np.zeros((len(window.ids), 3), dtype=np.float32)
    first, second = (token for _, token in encoded.label_tokens)
    logits[first] = [0.0, 2.0, 1.0]  # "schwarz": B-PER
    logits[first + 1 : second] = [5.0, 0.0, 0.0]  # later sub-tokens of the word say O: ignored
    logits[second] = [3.0, 0.0, 0.0]
    labels = label_words(encoded, [logits], {0: "O", 1: "B-PER", 2: "I-PER"})
    assert [entity["entity"] for entity in labels] == ["B-PER", "O"]
    assert labels[0]["score"] == pytest.approx(math.exp(2) / (1 + math.exp(2) + math.exp(1)), rel=1e-6)
    assert labels[1]["score"] == pytest.approx(math.exp(3) / (math.exp(3) + 2), rel=1e-6)
    padded = np.concatenate([logits, np.full((5, 3), 99.0, dtype=np.float32)])  # a batch's padding is never read
    assert label_words(encoded, [padded], {0: "O", 1: "B-PER", 2: "I-PER"}) == labels


def expected_label_tokens(words: list[str], windows: list[Encoding], whole: Encoding) -> list[tuple[int, int]]:
    """Independently of the windows' arithmetic: find each word's first sub-token in every window by its
    (word, character offsets) key, and keep the window where it is farthest from both content ends."""
    first = first_sub_tokens(whole)
    chosen = []
    for word in range(len(words)):
        key = (word, whole.offsets[first[word]])
        best: tuple[int, int, int] | None = None
        for window_index, window in enumerate(windows):
            content = [index for index, special in enumerate(window.special_tokens_mask) if not special]
            for position, token in enumerate(content):
                if (window.word_ids[token], window.offsets[token]) == key:
                    context = min(position, len(content) - 1 - position)
                    if best is None or context > best[0]:
                        best = (context, window_index, token)
        assert best is not None, f"word {word} in no window"
        chosen.append((best[1], best[2]))
    return chosen


def test_a_word_in_two_windows_is_labelled_where_it_has_more_context(base: Tokenizer) -> None:
    words = (WORDS * 6)[:60]
    max_length, stride = 16, 6
    encoded = encode_word_lists(windowing_tokenizer(base, max_length, stride), [words])[0]
    whole = base.encode(words, is_pretokenized=True)
    assert len(encoded.windows) > 4 and all(len(window.ids) <= max_length for window in encoded.windows)
    expected = expected_label_tokens(words, encoded.windows, whole)
    assert encoded.label_tokens == expected
    for (window, token), word in zip(encoded.label_tokens, range(len(words)), strict=True):
        assert encoded.windows[window].ids[token] == whole.ids[first_sub_tokens(whole)[word]]

    # words whose first sub-token is in two windows: some are read from the earlier one, some from the later
    in_windows = [
        [
            k
            for k, window in enumerate(encoded.windows)
            if (word, whole.offsets[first]) in zip(window.word_ids, window.offsets, strict=True)
        ]
        for word, first in first_sub_tokens(whole).items()
    ]
    picked = [window for window, _ in encoded.label_tokens]
    overlapping = [(windows, pick) for windows, pick in zip(in_windows, picked, strict=True) if len(windows) > 1]
    assert any(pick == windows[0] for windows, pick in overlapping)
    assert any(pick == windows[-1] for windows, pick in overlapping)

    # window k's logits all say label k: the label names the window each word was read from
    logits = [
        one_hot_logits(len(window.ids), len(encoded.windows), [k] * len(window.ids))
        for k, window in enumerate(encoded.windows)
    ]
    labels = label_words(encoded, logits, {k: f"W{k}" for k in range(len(encoded.windows))})
    assert [entity["entity"] for entity in labels] == [f"W{window}" for window in picked]
    assert [entity["index"] for entity in labels] == list(range(len(words)))
    text = " ".join(words)
    assert all(text[entity["start"] : entity["end"]] == entity["word"] for entity in labels)


def test_a_batch_of_word_lists_equals_one_list_at_a_time(base: Tokenizer) -> None:
    tokenizer = windowing_tokenizer(base, 16, 4)
    lists = [WORDS, ["Paris"], WORDS[::-1]]
    batch = encode_word_lists(tokenizer, lists)
    for words, encoded in zip(lists, batch, strict=True):
        (alone,) = encode_word_lists(tokenizer, [words])  # one list: tokenizer.encode, not encode_batch
        assert encoded.words == tuple(words) and encoded.label_tokens == alone.label_tokens
        assert [window.ids for window in encoded.windows] == [window.ids for window in alone.windows]


@pytest.mark.parametrize(
    "words",
    [[], ["EU", ""], ["EU", "  "], ["EU", "\u200b"], ["EU", 5], "EU rejects"],
    ids=["no-words", "empty-word", "blank-word", "word-without-tokens", "not-a-string", "a-string"],
)
def test_words_that_cannot_be_labelled_are_decode_input_errors(base: Tokenizer, words: list) -> None:
    with pytest.raises(DecodeInputError):
        encode_word_lists(windowing_tokenizer(base, 32, 8), [words])


def test_an_unconfigured_tokenizer_is_refused(base: Tokenizer) -> None:
    with pytest.raises(ValueError, match="windowing_tokenizer"):
        encode_word_lists(base, [WORDS])
    with pytest.raises(ValueError, match="windowing_tokenizer"):
        encode_question_contexts(windowing_tokenizer(base, 32, 8), [("q?", "c")], 101)  # longest_first, not only_second
    assert issubclass(DecodeInputError, ValueError)


# ------------------------------------------------------------------------------------------------ QA


def test_resolve_window_takes_the_pipeline_defaults() -> None:
    assert resolve_window(512) == (384, 128)
    assert resolve_window(128) == (128, 64)
    assert resolve_window(128, max_seq_len=100) == (100, 50)
    assert resolve_window(128, doc_stride=10) == (128, 10)
    for bad in ({"max_seq_len": 129}, {"doc_stride": -1}, {"max_seq_len": 16, "doc_stride": 17}):
        with pytest.raises(DecodeInputError):
            resolve_window(128, **bad)


def qa_encode(base: Tokenizer, question: str, context: str, max_seq_len: int = 64, doc_stride: int = 16) -> QAWindows:
    check_room_for_context(base, [(question, context)], max_seq_len, doc_stride)
    tokenizer = windowing_tokenizer(base, max_seq_len, doc_stride, "only_second")
    (encoded,) = encode_question_contexts(tokenizer, [(question, context)], base.token_to_id("[CLS]"))
    return encoded


def peaked(window: Encoding, starts: list[int], ends: list[int]) -> tuple[np.ndarray, np.ndarray]:
    start, end = np.zeros(len(window.ids), dtype=np.float32), np.zeros(len(window.ids), dtype=np.float32)
    start[starts] = 10.0
    end[ends] = 10.0
    return start, end


def context_token(window: Encoding, token: str) -> int:
    return next(
        i for i, (t, s) in enumerate(zip(window.tokens, window.sequence_ids, strict=True)) if t == token and s == 1
    )


def span_probability(encoded: QAWindows, window: int) -> float:
    """start * end probability of a span whose start and end logits are 10 (all others 0), as the pipeline
    scores it: a softmax over the tokens that may answer (context and CLS)."""
    allowed = int((~encoded.p_masks[window]).sum())
    return (math.exp(10.0) / (math.exp(10.0) + allowed - 1)) ** 2


def test_qa_windows_mask_everything_but_the_context_and_cls(base: Tokenizer) -> None:
    encoded = qa_encode(base, "Where does John live?", "John Smith lives in Paris with his family.")
    (window,) = encoded.windows
    assert window.tokens[0] == "[CLS]" and not encoded.p_masks[0][0]
    for token, sequence, masked in zip(window.tokens[1:], window.sequence_ids[1:], encoded.p_masks[0][1:], strict=True):
        assert masked == (sequence != 1), token


def test_qa_decode_gives_the_span_and_its_character_offsets(base: Tokenizer) -> None:
    context = "John Smith lives in Paris with his family."
    encoded = qa_encode(base, "Where does John live?", context)
    (window,) = encoded.windows
    paris = context_token(window, "paris")
    (answer,) = decode_qa_answers(encoded, *([logits] for logits in peaked(window, [paris], [paris])))
    assert answer == {
        "answer": "Paris",
        "score": pytest.approx(span_probability(encoded, 0), rel=1e-5),
        "start": context.index("Paris"),
        "end": context.index("Paris") + 5,
    }
    john, smith = context_token(window, "john"), context_token(window, "smith")
    (answer,) = decode_qa_answers(encoded, *([logits] for logits in peaked(window, [john], [smith])))
    assert (answer["answer"], answer["start"], answer["end"]) == ("John Smith", 0, 10)
    # an end before the start is no span; a span longer than max_answer_len tokens neither
    start, end = peaked(window, [smith], [john])
    assert decode_qa_answers(encoded, [start], [end])[0]["answer"] != "John Smith"
    start, end = peaked(window, [john], [paris])
    assert decode_qa_answers(encoded, [start], [end], max_answer_len=5)[0]["answer"] == "John Smith lives in Paris"
    assert decode_qa_answers(encoded, [start], [end], max_answer_len=4)[0]["answer"] != "John Smith lives in Paris"


def test_qa_spans_are_word_aligned(base: Tokenizer) -> None:
    context = "Schwarzenegger lives in Paris."
    encoded = qa_encode(base, "Who?", context)
    (window,) = encoded.windows
    start, end = peaked(window, [context_token(window, "schwarz")], [context_token(window, "##ene")])
    (answer,) = decode_qa_answers(encoded, [start], [end])
    assert (answer["answer"], answer["start"], answer["end"]) == ("Schwarzenegger", 0, 14)


def test_qa_top_k_and_the_null_answer(base: Tokenizer) -> None:
    context = "John Smith lives in Paris with his family."
    encoded = qa_encode(base, "Where does John live?", context)
    (window,) = encoded.windows
    start, end = peaked(window, [0], [0])  # CLS: the model says "no answer"
    answers = decode_qa_answers(encoded, [start], [end], top_k=3, handle_impossible_answer=True)
    assert len(answers) == 3 and answers[0]["answer"] == "" and (answers[0]["start"], answers[0]["end"]) == (0, 0)
    scores = [answer["score"] for answer in answers]
    assert scores == sorted(scores, reverse=True)
    assert all(answer["answer"] for answer in decode_qa_answers(encoded, [start], [end], top_k=3))
    bad_params: list[dict[str, Any]] = [{"top_k": 0}, {"max_answer_len": 0}, {"top_k": True}]
    for bad in bad_params:
        with pytest.raises(DecodeInputError):
            decode_qa_answers(encoded, [start], [end], **bad)


def test_qa_answers_merge_across_windows(base: Tokenizer) -> None:
    filler = "The river flows through the old city towards the mountains in the north. "
    context = filler * 2 + "John lives in Paris. " + filler * 2
    encoded = qa_encode(base, "Where?", context, max_seq_len=32, doc_stride=12)
    with_paris = [k for k, window in enumerate(encoded.windows) if "paris" in window.tokens]
    assert len(encoded.windows) > 3 and len(with_paris) >= 2
    starts, ends = [], []
    for window in encoded.windows:
        hot = [context_token(window, "paris")] if "paris" in window.tokens else []
        start, end = peaked(window, hot, hot)
        starts.append(start)
        ends.append(end)
    best = decode_qa_answers(encoded, starts, ends)[0]
    assert (best["answer"], best["start"]) == ("Paris", context.index("Paris"))
    # the same answer from several windows: one answer, its scores added
    assert best["score"] == pytest.approx(sum(span_probability(encoded, k) for k in with_paris), rel=1e-5)
    assert best["score"] > 1.0
    kept = decode_qa_answers(encoded, starts, ends, score_aggregation="max")[0]
    assert (kept["answer"], kept["start"]) == ("Paris", context.index("Paris"))
    assert kept["score"] == pytest.approx(max(span_probability(encoded, k) for k in with_paris), rel=1e-5)
    assert 0.0 <= kept["score"] <= 1.0
    with pytest.raises(DecodeInputError, match="score_aggregation"):
        decode_qa_answers(encoded, starts, ends, score_aggregation="mean")


def test_a_question_without_room_for_context_is_a_decode_input_error(base: Tokenizer) -> None:
    context = "John Smith lives in Paris with his family. " * 4
    with pytest.raises(DecodeInputError, match="doc_stride"):
        qa_encode(base, "where " * 20 + "?", context, max_seq_len=32, doc_stride=8)
    qa_encode(base, "where " * 20 + "?", "Paris.", max_seq_len=32, doc_stride=8)  # fits: no windowing needed


@pytest.mark.parametrize("top_k", [1, 3, 12, 22, 40])
@pytest.mark.parametrize("logits", ["random", "tied"])
@pytest.mark.parametrize("shape", [(7, 6, 3), (6, 384, 15)], ids=["short", "384"])
def test_window_spans_equal_the_pipelines_window_by_window(
    top_k: int, logits: str, shape: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several windows at once, against transformers' own per-window ``select_starts_ends``: the same spans in the
    same order (ties too: small integer logits), the same scores and null scores. Short windows with a top_k past
    the candidates, a window whose only allowed token is CLS and one with CLS masked included; at 384 tokens the
    windows without ties score only the band, the tied ones all pairs."""
    from transformers.pipelines.question_answering import select_starts_ends

    import contract.decoding

    square_rows = []
    square_spans = contract.decoding._square_spans
    monkeypatch.setattr(
        contract.decoding, "_square_spans", lambda s, *a: square_rows.append(len(s)) or square_spans(s, *a)
    )
    rng = np.random.default_rng(top_k)
    windows, length, max_answer_len = shape
    if logits == "random":
        start, end = rng.normal(size=(2, windows, length)).astype(np.float32)
    else:
        start, end = rng.integers(0, 3, size=(2, windows, length)).astype(np.float32)
    p_mask = rng.random((windows, length)) < 0.4
    p_mask[:-2, 0] = False  # CLS unmasked (the null answer), as qa_p_mask leaves it
    p_mask[-2, 0] = True  # CLS masked: the pipeline still counts index 0 as allowed (its index-pair membership)
    p_mask[-1, 1:] = True  # nothing but CLS may be an answer
    spans, null_scores = select_window_spans(start, end, p_mask, top_k, max_answer_len)
    if length == 384:  # every window but the CLS-only one scores the band unless its logits tie
        assert sum(square_rows) == (windows if logits == "tied" else 1)
    for w in range(windows):
        starts, ends, scores, null = select_starts_ends(
            start[w][None], end[w][None], p_mask[w][None].astype(np.int64), None, 1e6, top_k, True, max_answer_len
        )
        np.testing.assert_array_equal(spans[w][0], starts)
        np.testing.assert_array_equal(spans[w][1], ends)
        np.testing.assert_array_equal(spans[w][2], scores)
        assert null_scores[w].item() == null
