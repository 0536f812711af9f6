"""Extractive question answering with the semantics of transformers 4.57.6 ``QuestionAnsweringPipeline``.

The context is split into overlapping windows (``only_second`` truncation to ``max_seq_len`` with
``doc_stride`` overlap); every window is one model row. Span decoding, the null answer, merging of
equal answers across windows and word alignment follow the pipeline's fast-tokenizer path
(``decode_spans`` / ``select_starts_ends`` are transcribed with the same numpy operations so that
ties break the same way). As in that path, ``max_question_len`` is accepted but does not truncate
the question: a question that leaves no room for the context is a client error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Encoding

from service.tasks.base import InputError, ModelContext, Prepared
from service.tasks.common import (
    encode_batch,
    require_text,
    require_top_k,
    to_sequence,
    truncating_tokenizer,
    with_windows,
)

_PIPELINE_MAX_SEQ_LEN = 384
_PIPELINE_MAX_DOC_STRIDE = 128
_CONTEXT_SEQUENCE = 1


@dataclass(frozen=True, slots=True)
class QAInput:
    question: str
    context: str


@dataclass(frozen=True, slots=True)
class QAParams:
    """``None`` for ``doc_stride`` / ``max_seq_len`` means the pipeline's defaults:
    ``max_seq_len = min(max_length, 384)`` and ``doc_stride = min(max_seq_len // 2, 128)``."""

    top_k: int = 1
    doc_stride: int | None = None
    max_answer_len: int = 15
    max_seq_len: int | None = None
    max_question_len: int = 64
    handle_impossible_answer: bool = False


@dataclass(slots=True)
class _QAState:
    context: str
    windows: list[Encoding]
    p_masks: list[np.ndarray]  # one (T,) bool per window: True where the token cannot be in the answer


def resolve_window(ctx: ModelContext, params: QAParams) -> tuple[int, int]:
    max_seq_len = params.max_seq_len if params.max_seq_len is not None else min(ctx.max_length, _PIPELINE_MAX_SEQ_LEN)
    if max_seq_len > ctx.max_length:
        raise InputError(f"max_seq_len {max_seq_len} is larger than the model's max_length {ctx.max_length}")
    doc_stride = params.doc_stride if params.doc_stride is not None else min(max_seq_len // 2, _PIPELINE_MAX_DOC_STRIDE)
    if doc_stride < 0:
        raise InputError(f"doc_stride must be >= 0, got {doc_stride}")
    if doc_stride > max_seq_len:
        raise InputError(f"doc_stride ({doc_stride}) is larger than max_seq_len ({max_seq_len})")
    return max_seq_len, doc_stride


def _check_postprocess_params(params: QAParams) -> None:
    require_top_k(params.top_k)
    require_top_k(params.max_answer_len, "max_answer_len")


def decode_spans(
    start: np.ndarray, end: np.ndarray, topk: int, max_answer_len: int, undesired_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pipeline's ``decode_spans``: the ``topk`` best (start, end) pairs by start * end probability."""
    if start.ndim == 1:
        start = start[None]
    if end.ndim == 1:
        end = end[None]
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))  # (1, T, T)
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    scores_flat = candidates.flatten()
    if topk == 1:
        idx_sort = np.array([np.argmax(scores_flat)])
    elif len(scores_flat) < topk:
        idx_sort = np.argsort(-scores_flat)
    else:
        idx = np.argpartition(-scores_flat, topk)[0:topk]
        idx_sort = idx[np.argsort(-scores_flat[idx])]
    starts, ends = np.unravel_index(idx_sort, candidates.shape)[1:]
    # like the pipeline: membership in the (row, column) index pair of a (1, T) mask
    allowed = undesired_tokens.nonzero()
    desired_spans = np.isin(starts, allowed) & np.isin(ends, allowed)
    starts = starts[desired_spans]
    ends = ends[desired_spans]
    return starts, ends, candidates[0, starts, ends]


def select_starts_ends(
    start: np.ndarray,
    end: np.ndarray,
    p_mask: np.ndarray,
    min_null_score: float,
    top_k: int,
    handle_impossible_answer: bool,
    max_answer_len: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The pipeline's ``select_starts_ends`` for one unpadded window; ``start``/``end`` are (1, T) logits."""
    undesired_tokens = np.abs(p_mask.astype(np.int64) - 1)[None]  # (1, T): 1 where the answer may be
    undesired_tokens_mask = undesired_tokens == 0.0
    start = np.where(undesired_tokens_mask, -10000.0, start)
    end = np.where(undesired_tokens_mask, -10000.0, end)
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    if handle_impossible_answer:
        min_null_score = min(min_null_score, (start[0, 0] * end[0, 0]).item())
    start[0, 0] = end[0, 0] = 0.0
    starts, ends, scores = decode_spans(start, end, top_k, min(max_answer_len, start.shape[-1]), undesired_tokens)
    return starts, ends, scores, min_null_score


def _char_span(window: Encoding, start_token: int, end_token: int) -> tuple[int, int]:
    """Word-aligned character span of tokens ``start_token..end_token`` (the pipeline's ``get_indices``)."""
    start_word = window.token_to_word(start_token)
    end_word = window.token_to_word(end_token)
    if start_word is not None and end_word is not None:
        start_chars = window.word_to_chars(start_word, _CONTEXT_SEQUENCE)
        end_chars = window.word_to_chars(end_word, _CONTEXT_SEQUENCE)
        if start_chars is not None and end_chars is not None:
            return start_chars[0], end_chars[1]
    return window.offsets[start_token][0], window.offsets[end_token][1]


def _p_mask(window: Encoding, cls_token_id: int) -> np.ndarray:
    sequence_ids = window.sequence_ids
    p_mask = np.array([sequence_id != _CONTEXT_SEQUENCE for sequence_id in sequence_ids], dtype=bool)
    p_mask[np.asarray(window.ids) == cls_token_id] = False  # the pipeline keeps CLS (the null answer) unmasked
    return p_mask


def _check_room_for_context(ctx: ModelContext, pairs: list[tuple[str, str]], max_seq_len: int, doc_stride: int) -> None:
    """A window must hold the question and more than ``doc_stride`` context tokens whenever the pair
    needs windowing (else ``tokenizers`` fails, and the pipeline with it)."""
    added = ctx.tokenizer.num_special_tokens_to_add(is_pair=True)
    questions = ctx.tokenizer.encode_batch([question for question, _ in pairs], add_special_tokens=False)
    for (question, context), encoded in zip(pairs, questions, strict=True):
        room = max_seq_len - len(encoded.ids) - added
        if room <= doc_stride and len(ctx.tokenizer.encode(question, context).ids) > max_seq_len:
            raise InputError(
                f"the question takes {len(encoded.ids)} tokens, which leaves {max(room, 0)} context tokens per "
                f"window of max_seq_len {max_seq_len}: not more than doc_stride {doc_stride}; shorten the question "
                "or raise max_seq_len / lower doc_stride"
            )


class QuestionAnsweringHandler:
    task: str = "question-answering"
    output_names: tuple[str, ...] = ("start_logits", "end_logits")

    def prepare(self, ctx: ModelContext, inputs: list[Any], params: QAParams) -> list[Prepared]:
        _check_postprocess_params(params)
        max_seq_len, doc_stride = resolve_window(ctx, params)
        pairs: list[tuple[str, str]] = []
        for item in inputs:
            if not isinstance(item, QAInput):
                raise InputError("a question-answering input needs a question and a context")
            pairs.append((require_text(item.question, "question"), require_text(item.context, "context")))
        _check_room_for_context(ctx, pairs, max_seq_len, doc_stride)
        tokenizer = truncating_tokenizer(ctx.tokenizer, max_seq_len, doc_stride, "only_second")
        prepared = []
        for (_, context), encoding in zip(pairs, encode_batch(tokenizer, pairs, "question and context"), strict=True):
            windows = with_windows(encoding)
            state = _QAState(context, windows, [_p_mask(window, ctx.cls_token_id) for window in windows])
            prepared.append(Prepared(sequences=[to_sequence(window) for window in windows], state=state))
        return prepared

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: QAParams
    ) -> list[dict[str, Any]]:
        _check_postprocess_params(params)
        state: _QAState = prepared.state
        min_null_score = 1000000.0
        pre_topk = params.top_k * 2 + 10  # the pipeline over-asks because word alignment merges candidates
        answers: list[dict[str, Any]] = []
        for window, p_mask, output in zip(state.windows, state.p_masks, outputs, strict=True):
            starts, ends, scores, min_null_score = select_starts_ends(
                np.asarray(output["start_logits"])[None],
                np.asarray(output["end_logits"])[None],
                p_mask,
                min_null_score,
                pre_topk,
                params.handle_impossible_answer,
                params.max_answer_len,
            )
            for start_token, end_token, score in zip(starts, ends, scores, strict=True):
                start_char, end_char = _char_span(window, int(start_token), int(end_token))
                text = state.context[start_char:end_char]
                same = next((answer for answer in answers if answer["answer"].lower() == text.lower()), None)
                if same is not None:
                    same["score"] += score.item()
                else:
                    answers.append({"score": score.item(), "start": start_char, "end": end_char, "answer": text})
        if params.handle_impossible_answer:
            answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
        answers = sorted(answers, key=lambda answer: answer["score"], reverse=True)[: params.top_k]
        return [
            {
                "answer": answer["answer"],
                "score": float(answer["score"]),
                "start": answer["start"],
                "end": answer["end"],
            }
            for answer in answers
        ]
