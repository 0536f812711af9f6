"""One decode path: the windowing and post-processing that the service serves and training scores.

Torch-free (numpy + ``tokenizers`` only), so that ``service/`` (which never imports torch or
``training/``) and ``training/`` (which never imports ``service/``) both import it; the metric a
fine-tuning run reports is then computed through exactly what the service answers with.

Question answering follows transformers 4.57.6 ``QuestionAnsweringPipeline`` (fast-tokenizer path):
the context is split into overlapping windows (``only_second`` truncation to ``max_seq_len`` with
``doc_stride`` overlap); every window is one model row. Span decoding, the null answer, merging of
equal answers across windows and word alignment follow the pipeline (its ``select_starts_ends`` and
``decode_spans`` are transcribed with the same numpy operations, row by row over the windows of one
length, so that ties break the same way; a window without ties scores only the band of allowed spans, which
gives the same answer faster). As in that path, ``max_question_len`` does not truncate
the question: a question that leaves no room for the context is an input error.

Word-level token classification (pre-split words) is ``contract.word_decoding``, on the same windowing.

Tokenizers passed in are ``tokenizers.Tokenizer`` objects. Functions that window take one whose
truncation is already configured (see ``windowing_tokenizer``): configuring a shared tokenizer per
call would race between threads. Bad input raises ``DecodeInputError`` (a ``ValueError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

PIPELINE_MAX_SEQ_LEN = 384
PIPELINE_MAX_DOC_STRIDE = 128
QA_SCORE_AGGREGATIONS = ("sum", "max")  # how equal answers from several windows or spans merge
_CONTEXT_SEQUENCE = 1


class DecodeInputError(ValueError):
    """An input (or parameter) the decode path cannot process; the service answers it as a client error."""


# ---------------------------------------------------------------------------------------------- tokenizers


def windowing_tokenizer(
    base: Tokenizer, max_length: int, stride: int = 0, strategy: str = "longest_first"
) -> Tokenizer:
    """A copy of ``base`` without padding, truncating to ``max_length`` with ``stride`` overlapping windows.

    Copying takes ~80 ms for a 30k-word vocabulary: make one per (max_length, stride, strategy) and
    reuse it (the service keeps per-thread copies instead, see ``service.tasks.base``).
    """
    configured = Tokenizer.from_str(base.to_str())
    configured.no_padding()
    configured.enable_truncation(max_length, stride=stride, strategy=strategy, direction="right")
    return configured


def truncation_settings(tokenizer: Tokenizer, strategy: str) -> dict[str, Any]:
    truncation = tokenizer.truncation
    if truncation is None or truncation.get("strategy") != strategy or truncation.get("direction", "right") != "right":
        raise ValueError(
            f"the tokenizer must truncate with strategy {strategy!r} (direction right), has {truncation!r}: "
            "configure it with windowing_tokenizer()"
        )
    if tokenizer.padding is not None:
        raise ValueError("the tokenizer must not pad: configure it with windowing_tokenizer()")
    return truncation


def with_windows(encoding: Encoding) -> list[Encoding]:
    """The encoding followed by its overflowing windows, in the order transformers flattens them."""
    return [encoding, *encoding.overflowing]


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DecodeInputError(f"{what} must be an integer >= 1, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------- question answering


@dataclass(slots=True)
class QAWindows:
    """One (question, context) pair, windowed: what decoding its answers needs besides the logits."""

    context: str
    windows: list[Encoding]  # one model row each: ``ids`` / ``type_ids``, attention all ones
    p_masks: list[np.ndarray]  # one (T,) bool per window: True where the token cannot be in the answer


def resolve_window(max_length: int, max_seq_len: int | None = None, doc_stride: int | None = None) -> tuple[int, int]:
    """``(max_seq_len, doc_stride)``; ``None`` means the pipeline's defaults:
    ``max_seq_len = min(max_length, 384)`` and ``doc_stride = min(max_seq_len // 2, 128)``."""
    max_seq_len = max_seq_len if max_seq_len is not None else min(max_length, PIPELINE_MAX_SEQ_LEN)
    if max_seq_len > max_length:
        raise DecodeInputError(f"max_seq_len {max_seq_len} is larger than the model's max_length {max_length}")
    doc_stride = doc_stride if doc_stride is not None else min(max_seq_len // 2, PIPELINE_MAX_DOC_STRIDE)
    if doc_stride < 0:
        raise DecodeInputError(f"doc_stride must be >= 0, got {doc_stride}")
    if doc_stride > max_seq_len:
        raise DecodeInputError(f"doc_stride ({doc_stride}) is larger than max_seq_len ({max_seq_len})")
    return max_seq_len, doc_stride


def check_room_for_context(
    tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], max_seq_len: int, doc_stride: int
) -> None:
    """A window must hold the question and more than ``doc_stride`` context tokens whenever the pair
    needs windowing (else ``tokenizers`` fails, and the pipeline with it).

    ``tokenizer`` is one *without* truncation (it measures the whole pair); call this before
    ``encode_question_contexts``.
    """
    added = tokenizer.num_special_tokens_to_add(is_pair=True)
    questions = tokenizer.encode_batch([question for question, _ in pairs], add_special_tokens=False)
    for (question, context), encoded in zip(pairs, questions, strict=True):
        room = max_seq_len - len(encoded.ids) - added
        if room <= doc_stride and len(tokenizer.encode(question, context).ids) > max_seq_len:
            raise DecodeInputError(
                f"the question takes {len(encoded.ids)} tokens, which leaves {max(room, 0)} context tokens per "
                f"window of max_seq_len {max_seq_len}: not more than doc_stride {doc_stride}; shorten the question "
                "or raise max_seq_len / lower doc_stride"
            )


def qa_p_mask(window: Encoding, cls_token_id: int) -> np.ndarray:
    """(T,) bool, True where the token cannot start or end an answer: everything but the context and CLS."""
    p_mask = np.array([sequence_id != _CONTEXT_SEQUENCE for sequence_id in window.sequence_ids], dtype=bool)
    p_mask[np.asarray(window.ids) == cls_token_id] = False  # the pipeline keeps CLS (the null answer) unmasked
    return p_mask


def qa_windows(context: str, encoding: Encoding, cls_token_id: int) -> QAWindows:
    """The windows of one encoded (question, context) pair (``encoding`` and its overflowing windows)."""
    windows = with_windows(encoding)
    return QAWindows(context, windows, [qa_p_mask(window, cls_token_id) for window in windows])


def encode_question_contexts(
    tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], cls_token_id: int
) -> list[QAWindows]:
    """Encode (question, context) pairs into windows: the question whole in every window, the context
    strided. ``tokenizer`` truncates ``only_second`` to ``max_seq_len`` with stride ``doc_stride``
    (``windowing_tokenizer(base, max_seq_len, doc_stride, "only_second")``); run
    ``check_room_for_context`` first for a clear error on questions too long to window.
    """
    truncation_settings(tokenizer, "only_second")
    pairs = list(pairs)
    try:
        if len(pairs) == 1:  # one pair: encode() skips encode_batch's thread-pool dispatch
            encodings = [tokenizer.encode(*pairs[0])]
        else:
            encodings = tokenizer.encode_batch(pairs, add_special_tokens=True)
    except Exception as exc:  # tokenizers raises a bare Exception for truncation errors
        raise DecodeInputError(f"cannot tokenize the question and context: {exc}") from exc
    return [
        qa_windows(context, encoding, cls_token_id) for (_, context), encoding in zip(pairs, encodings, strict=True)
    ]


_CANDIDATE_BYTES = 32 << 20  # windows' candidate scores worked out at once, at most


def select_window_spans(
    start: np.ndarray,
    end: np.ndarray,
    p_mask: np.ndarray,
    top_k: int,
    max_answer_len: int,
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]:
    """The pipeline's ``select_starts_ends`` and ``decode_spans`` for W windows of one length T at once: ``start`` /
    ``end`` (W, T) logits, ``p_mask`` (W, T).

    Returns each window's ``(starts, ends, scores)``, best first, and (W,) its null answer's score (CLS start x
    CLS end probability).

    The pipeline scores all T x T (start, end) pairs, zero outside the band i <= j < i + max_answer_len, and keeps
    the ``top_k`` best. A window's best ``top_k`` lie in the band whenever they are positive; where they are also
    distinct from each other and from the next best, which ``top_k`` and their order are unique, so scoring only
    the band's T x max_answer_len pairs (``_band_spans``, 1/25 of the pairs at 384 tokens and max_answer_len 15)
    gives the pipeline's answer exactly. The other windows (ties, or fewer positive candidates than ``top_k``: a tiny
    context or a large ``top_k``) take the pipeline's own T x T path (``_square_spans``), so ties break its way."""
    allowed = ~p_mask  # (W, T): where the answer may be
    start = np.where(p_mask, -10000.0, start)
    end = np.where(p_mask, -10000.0, end)
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum(axis=-1, keepdims=True)
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum(axis=-1, keepdims=True)
    null_scores = start[:, 0] * end[:, 0]
    start[:, 0] = end[:, 0] = 0.0
    # like the pipeline: membership in the (row, column) index pair of a (1, T) mask, so column 0 counts as allowed
    # whenever anything is
    members = allowed.copy()
    members[:, 0] |= allowed.any(axis=1)
    best, unique = _band_spans(start, end, top_k, max_answer_len)
    if not unique.all():
        ties = np.flatnonzero(~unique)
        for row, found in zip(ties, _square_spans(start[ties], end[ties], top_k, max_answer_len), strict=True):
            best[row] = found
    spans = []
    for (starts, ends, scores), window_members in zip(best, members, strict=True):
        desired = window_members[starts] & window_members[ends]
        spans.append((starts[desired], ends[desired], scores[desired]))
    return spans, null_scores


def _band_spans(
    start: np.ndarray, end: np.ndarray, top_k: int, max_answer_len: int
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray]:
    """Each window's ``top_k`` best (start, end, score) within the band, best first, from start / end
    probabilities (W, T); and (W,) whether they are the pipeline's: positive, and each better than the next,
    the last better than the band's next best."""
    windows, length = start.shape
    width = min(max_answer_len, length)
    if length * width <= top_k:
        return [_NONE] * windows, np.zeros(windows, dtype=bool)
    padded = np.concatenate([end, np.zeros((windows, width - 1), dtype=end.dtype)], axis=1)
    ahead = np.lib.stride_tricks.sliding_window_view(padded, width, axis=1)  # (W, T, width): end prob of i + d
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    unique = np.empty(windows, dtype=bool)
    step = max(1, _CANDIDATE_BYTES // (4 * length * width))
    for first in range(0, windows, step):
        rows = slice(first, first + step)
        scores_flat = (start[rows, :, None] * ahead[rows]).reshape(-1, length * width)  # (w, T * width)
        idx = np.argpartition(-scores_flat, top_k, axis=1)[:, : top_k + 1]  # the top_k + 1 best, unordered
        values = np.take_along_axis(scores_flat, idx, 1)
        order = np.argsort(-values, axis=1)
        idx, values = np.take_along_axis(idx, order, 1), np.take_along_axis(values, order, 1)
        unique[rows] = np.all(values[:, :-1] > values[:, 1:], axis=1) & (values[:, top_k - 1] > 0)
        starts = idx[:, :top_k] // width
        ends = starts + idx[:, :top_k] % width
        found += list(zip(starts, ends, values[:, :top_k], strict=True))
    return found, unique


_NONE = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))


def _square_spans(
    start: np.ndarray, end: np.ndarray, top_k: int, max_answer_len: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The pipeline's own top ``top_k`` of all T x T pairs, zero outside the band, with its numpy operations row by
    row (so ties break the same way), for start / end probabilities (W, T)."""
    windows, length = start.shape
    # (T, T): where an answer may start at i and end at j, i <= j < i + max_answer_len
    band = np.tril(np.triu(np.ones((length, length), dtype=bool)), min(max_answer_len, length) - 1)
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    step = max(1, _CANDIDATE_BYTES // (4 * length * length))
    for first in range(0, windows, step):
        rows = slice(first, first + step)
        outer = start[rows, :, None] * end[rows, None, :]  # (w, T, T): start x end probability
        scores_flat = np.where(band, outer, 0.0).reshape(outer.shape[0], -1)
        if top_k == 1:
            idx_sort = scores_flat.argmax(axis=1)[:, None]
        elif scores_flat.shape[1] < top_k:
            idx_sort = np.argsort(-scores_flat, axis=1)
        else:
            idx = np.argpartition(-scores_flat, top_k, axis=1)[:, :top_k]
            idx_sort = np.take_along_axis(idx, np.argsort(-np.take_along_axis(scores_flat, idx, 1), axis=1), 1)
        scores = np.take_along_axis(scores_flat, idx_sort, 1)
        found += list(zip(idx_sort // length, idx_sort % length, scores, strict=True))
    return found


def char_span(window: Encoding, start_token: int, end_token: int) -> tuple[int, int]:
    """Word-aligned character span of tokens ``start_token..end_token`` (the pipeline's ``get_indices``)."""
    start_word = window.token_to_word(start_token)
    end_word = window.token_to_word(end_token)
    if start_word is not None and end_word is not None:
        start_chars = window.word_to_chars(start_word, _CONTEXT_SEQUENCE)
        end_chars = window.word_to_chars(end_word, _CONTEXT_SEQUENCE)
        if start_chars is not None and end_chars is not None:
            return start_chars[0], end_chars[1]
    return window.offsets[start_token][0], window.offsets[end_token][1]


def decode_qa_answers(
    encoded: QAWindows,
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    *,
    top_k: int = 1,
    max_answer_len: int = 15,
    handle_impossible_answer: bool = False,
    score_aggregation: str = "sum",
) -> list[dict[str, Any]]:
    """The pipeline's answers for one question: ``[{"answer", "score", "start", "end"}]``, best first.

    ``start_logits[i]`` / ``end_logits[i]`` are window ``i``'s (T,) logits; longer (padded) rows are
    cut to the window's length. Answers of equal text (case-insensitive) from different windows or
    spans merge, their scores added as the pipeline adds them (so a score may exceed 1), or with
    ``score_aggregation="max"`` the best of them kept (a probability in [0, 1], with the best one's
    span); with ``handle_impossible_answer`` the null answer
    (``""``, 0, 0) scored by the lowest CLS probability over windows competes. ``start``/``end`` are
    character offsets into ``encoded.context``.
    """
    _positive_int(top_k, "top_k")
    _positive_int(max_answer_len, "max_answer_len")
    if score_aggregation not in QA_SCORE_AGGREGATIONS:
        raise DecodeInputError(
            f"score_aggregation must be one of {', '.join(QA_SCORE_AGGREGATIONS)}, got {score_aggregation!r}"
        )
    if not len(encoded.windows) == len(start_logits) == len(end_logits):
        raise ValueError(
            f"{len(encoded.windows)} windows but {len(start_logits)} start and {len(end_logits)} end logit rows"
        )
    min_null_score = 1000000.0
    pre_topk = top_k * 2 + 10  # the pipeline over-asks because word alignment merges candidates
    by_length: dict[int, list[int]] = {}
    for index, window in enumerate(encoded.windows):
        by_length.setdefault(len(window.ids), []).append(index)
    spans: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [None] * len(encoded.windows)  # type: ignore[list-item]
    for length, indices in by_length.items():
        window_spans, null_scores = select_window_spans(
            np.stack([np.asarray(start_logits[i])[:length] for i in indices]),
            np.stack([np.asarray(end_logits[i])[:length] for i in indices]),
            np.stack([encoded.p_masks[i] for i in indices]),
            pre_topk,
            max_answer_len,
        )
        for i, one_window in zip(indices, window_spans, strict=True):
            spans[i] = one_window
        if handle_impossible_answer:
            min_null_score = min(min_null_score, *null_scores.tolist())
    answers: dict[str, dict[str, Any]] = {}  # by lower-cased text, in first-found order
    for window, (starts, ends, scores) in zip(encoded.windows, spans, strict=True):
        for start_token, end_token, score in zip(starts, ends, scores, strict=True):
            start_char, end_char = char_span(window, int(start_token), int(end_token))
            text = encoded.context[start_char:end_char]
            same = answers.get(text.lower())
            if same is None:
                answers[text.lower()] = {"score": score.item(), "start": start_char, "end": end_char, "answer": text}
            elif score_aggregation == "sum":
                same["score"] += score.item()
            elif score.item() > same["score"]:
                same.update(score=score.item(), start=start_char, end=end_char, answer=text)
    found = list(answers.values())
    if handle_impossible_answer:
        found.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    best = sorted(found, key=lambda answer: answer["score"], reverse=True)[:top_k]
    return [
        {
            "answer": answer["answer"],
            "score": float(answer["score"]),
            "start": answer["start"],
            "end": answer["end"],
        }
        for answer in best
    ]
