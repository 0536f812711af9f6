"""Word-level token classification: labels for pre-split words (CoNLL style), served and scored alike.

The words are encoded with ``is_pretokenized=True`` (windowed when they do not fit), and each word takes the
argmax label of its *first* sub-token, the convention training labels with. Offsets point into
``" ".join(words)``. Torch-free, like ``contract.decoding`` (whose windowing it shares).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

from contract.decoding import DecodeInputError, truncation_settings, with_windows


@dataclass(frozen=True, slots=True)
class WordWindows:
    """Pre-split words, encoded (and windowed): which token labels each word."""

    words: tuple[str, ...]
    windows: list[Encoding]  # one model row each: ``ids`` / ``type_ids``, attention all ones
    # per word: (window index, token index in that window) of the word's first sub-token, in the
    # window where that token has the most context on both sides
    label_tokens: list[tuple[int, int]]


def default_stride(max_length: int) -> int:
    """Overlap, in tokens, of the windows over a long text or word list when none is asked for."""
    return max_length // 4


def window_stride(tokenizer: Tokenizer, max_length: int, stride: int | None = None) -> int:
    """The overlap of single-sequence windows of ``max_length`` tokens: ``stride``, checked, or by default
    ``default_stride(max_length)`` (less where the windows' content is too short for it)."""
    room = max_length - tokenizer.num_special_tokens_to_add(is_pair=False)
    if stride is None:
        return min(default_stride(max_length), room - 1)
    if not 0 <= stride < room:
        raise DecodeInputError(
            f"stride must be in 0..{room - 1} for this model (max_length {max_length}), got {stride}"
        )
    return stride


def word_spans(words: Sequence[str]) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of each word in ``" ".join(words)``."""
    spans = []
    start = 0
    for word in words:
        spans.append((start, start + len(word)))
        start += len(word) + 1
    return spans


def _check_words(words: Sequence[str]) -> tuple[str, ...]:
    if isinstance(words, str) or not isinstance(words, Sequence):
        raise DecodeInputError(f"words must be a list of strings, got {type(words).__name__}")
    if not words:
        raise DecodeInputError("the list of words is empty")
    for index, word in enumerate(words):
        if not isinstance(word, str):
            raise DecodeInputError(f"word {index} must be a string, got {type(word).__name__}")
        if not word.strip():
            raise DecodeInputError(f"word {index} is empty")
    return tuple(words)


def _label_tokens(words: tuple[str, ...], windows: list[Encoding], stride: int) -> list[tuple[int, int]]:
    """Per word, where its first sub-token is labelled from (see ``WordWindows.label_tokens``).

    Windows of a single sequence advance by (content tokens - ``stride``): counting so gives each
    content token its index in the whole (unwindowed) content, which tells a word's first sub-token
    from its later ones even when a window starts in the middle of the word.
    """
    best: dict[int, tuple[int, int, int]] = {}  # word -> (context, window, token)
    first_content = 0  # global content index of the current window's first content token
    first_token: dict[int, int] = {}  # word -> global content index of its first sub-token
    for window_index, window in enumerate(windows):
        content = [index for index, special in enumerate(window.special_tokens_mask) if not special]
        word_ids = window.word_ids
        for position, token in enumerate(content):
            word = word_ids[token]
            if word is None:
                continue
            global_index = first_content + position
            if first_token.setdefault(word, global_index) != global_index:
                continue  # a later sub-token of the word
            context = min(position, len(content) - 1 - position)
            if word not in best or context > best[word][0]:
                best[word] = (context, window_index, token)
        first_content += len(content) - stride
    missing = [index for index in range(len(words)) if index not in best]
    if missing:
        index = missing[0]
        raise DecodeInputError(f"word {index} ({words[index]!r}) has no tokens for this model's tokenizer")
    return [best[index][1:] for index in range(len(words))]


def encode_word_lists(tokenizer: Tokenizer, word_lists: Sequence[Sequence[str]]) -> list[WordWindows]:
    """Encode lists of pre-split words (``is_pretokenized=True``), windowed where they do not fit.

    ``tokenizer`` truncates ``longest_first`` to the model's max length with the windows' overlap as
    stride: ``windowing_tokenizer(base, max_length, window_stride(base, max_length))``. A word that is
    empty, blank or tokenizes to nothing is a ``DecodeInputError``: it could not be labelled.
    """
    truncation = truncation_settings(tokenizer, "longest_first")
    stride = int(truncation["stride"])
    room = int(truncation["max_length"]) - tokenizer.num_special_tokens_to_add(is_pair=False)
    if not 0 <= stride < room:
        raise ValueError(f"stride {stride} must be in 0..{room - 1} for max_length {truncation['max_length']}")
    checked = [_check_words(words) for words in word_lists]
    try:
        if len(checked) == 1:  # one list: encode() skips encode_batch's thread-pool dispatch
            encodings = [tokenizer.encode(list(checked[0]), is_pretokenized=True)]
        else:
            encodings = tokenizer.encode_batch([list(words) for words in checked], is_pretokenized=True)
    except Exception as exc:  # tokenizers raises a bare Exception for truncation errors
        raise DecodeInputError(f"cannot tokenize the words: {exc}") from exc
    results = []
    for words, encoding in zip(checked, encodings, strict=True):
        windows = with_windows(encoding)
        results.append(WordWindows(words, windows, _label_tokens(words, windows, stride)))
    return results


def label_words(
    encoded: WordWindows, logits: Sequence[np.ndarray], id2label: Mapping[int, str]
) -> list[dict[str, Any]]:
    """One label per word, in word order: ``{"entity", "score", "index", "word", "start", "end"}``.

    ``logits[i]`` is window ``i``'s (T, num_labels) logits (padded rows are fine: only real tokens
    are read). A word's label is the argmax at its first sub-token (``encoded.label_tokens``), its
    score that label's softmax probability; ``index`` is the word's index and ``start``/``end`` its
    character span in ``" ".join(words)``. Labels missing from ``id2label`` read ``LABEL_<id>``.
    """
    if len(logits) != len(encoded.windows):
        raise ValueError(f"{len(encoded.windows)} windows but {len(logits)} logit rows")
    rows = np.stack([np.asarray(logits[window])[token] for window, token in encoded.label_tokens])  # (W, labels)
    shifted = np.exp(rows - rows.max(axis=-1, keepdims=True))
    scores = shifted / shifted.sum(axis=-1, keepdims=True)
    best = scores.argmax(axis=-1)
    results = []
    for index, (word, (start, end)) in enumerate(zip(encoded.words, word_spans(encoded.words), strict=True)):
        label = int(best[index])
        results.append(
            {
                "entity": id2label.get(label, f"LABEL_{label}"),
                "score": float(scores[index, label]),
                "index": index,
                "word": word,
                "start": start,
                "end": end,
            }
        )
    return results
