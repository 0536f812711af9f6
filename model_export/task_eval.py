"""A graph's score on labelled rows with its task's metric: what the int8 gate (``--eval-data``) measures.

Eval data is JSONL, one row per line, shaped like the task's v1 request input plus the gold answer:

- text-classification: ``{"text": str, "text_pair": str (optional), "label": str}``; accuracy.
- token-classification: ``{"words": [str], "tags": [str]}`` (one tag per word); entity F1 (conlleval chunks).
- question-answering: ``{"question": str, "context": str, "answers": [str]}``; SQuAD F1 (max over answers).
- fill-mask: ``{"text": str with one mask token, "target": str}`` (a vocabulary token, as written in the
  tokenizer's vocabulary: lower case for uncased models); top-1 accuracy.

The other tasks have no metric here. Rows are encoded and decoded the way the service does (the shared decode
path in ``decoding.py``: windowed QA contexts and word lists, word labels from the first sub-token), one model row
per call; texts longer than the model takes are truncated. Scores are percents, a loss is in percentage points.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from contract.bundle import Bundle
from contract.decoding import (
    DecodeInputError,
    check_room_for_context,
    decode_qa_answers,
    encode_question_contexts,
    resolve_window,
    windowing_tokenizer,
)
from contract.files import read_jsonl
from contract.mask_probes import plain_tokenizer
from contract.onnx_io import ort_session, pad_rows, run_session
from contract.tasks import task_spec
from contract.word_decoding import encode_word_lists, label_words, window_stride
from model_export.validate import ExportError
from training.metrics import accuracy, entity_metrics, squad_metrics

# Rows run alone: dynamic int8 scales activations over the whole batch (padding included), so a row's int8 answer
# would depend on the rows batched with it; alone, the figures do not depend on the file's order or size.
EVAL_BATCH_ROWS = 1
# task -> (metric name, the fields a row needs, what each must be)
EVAL_FORMATS: dict[str, tuple[str, dict[str, str]]] = {
    "text-classification": ("accuracy", {"text": "str", "label": "str"}),
    "token-classification": ("entity_f1", {"words": "list", "tags": "list"}),
    "question-answering": ("squad_f1", {"question": "str", "context": "str", "answers": "list"}),
    "fill-mask": ("top1_accuracy", {"text": "str", "target": "str"}),
}
EVAL_TASKS: tuple[str, ...] = tuple(EVAL_FORMATS)

Row = dict[str, Any]


class EvalDataError(ExportError):
    """Eval data that cannot be read or does not fit the task; the message names the file and line."""


@dataclass(frozen=True)
class EvalModel:
    """What predicting needs besides the graph: the bundle's tokenizer and label facts."""

    task: str
    tokenizer: Tokenizer
    max_length: int
    id2label: dict[int, str]
    cls_token_id: int
    pad_token_id: int
    mask_token: str
    use_token_types: bool = True

    @classmethod
    def from_bundle(cls, bundle: Bundle) -> EvalModel:
        tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
        special = bundle.spec.special_tokens
        ids = [tokenizer.token_to_id(token) for token in (special.cls_token, special.pad_token)]
        if None in ids:
            raise ExportError(f"{bundle.path}: the tokenizer lacks [CLS] or [PAD]")
        return cls(
            bundle.spec.task, tokenizer, bundle.spec.max_length, dict(bundle.spec.id2label), int(ids[0]),
            int(ids[1]), special.mask_token,
        )  # fmt: skip


def metric_name(task: str) -> str:
    if task not in EVAL_FORMATS:
        raise EvalDataError(f"task {task} has no eval metric for --eval-data (tasks with one: {', '.join(EVAL_TASKS)})")
    return EVAL_FORMATS[task][0]


def read_eval_rows(path: Path | str, task: str, id2label: dict[int, str] | None = None) -> list[Row]:
    """The JSONL rows of ``path``, each checked against the task's format (and, for labels, the head's labels)."""
    metric_name(task)
    path = Path(path)
    rows: list[Row] = []
    for number, row in read_jsonl(path, lambda message: EvalDataError(f"eval data {message}")):
        problem = _row_problem(task, row, id2label)
        if problem is not None:
            raise EvalDataError(f"eval data {path} line {number}: {problem}")
        rows.append(row)
    if not rows:
        raise EvalDataError(f"eval data {path}: no rows")
    return rows


def _row_problem(task: str, row: Row, id2label: dict[int, str] | None) -> str | None:
    _, fields = EVAL_FORMATS[task]
    for name, kind in fields.items():
        value = row.get(name)
        if kind == "str" and not isinstance(value, str):
            return f"{task} rows need {name!r} as a string (format: {format_hint(task)})"
        if kind == "list" and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            return f"{task} rows need {name!r} as a list of strings (format: {format_hint(task)})"
    if task == "text-classification" and id2label and row["label"] not in id2label.values():
        return f"label {row['label']!r} is not one of the model's labels ({', '.join(id2label.values())})"
    if task == "text-classification" and not isinstance(row.get("text_pair", ""), str):
        return "'text_pair' must be a string"
    if task == "token-classification" and len(row["words"]) != len(row["tags"]):
        return f"{len(row['words'])} words but {len(row['tags'])} tags"
    return None


def format_hint(task: str) -> str:
    return json.dumps({name: "..." if kind == "str" else ["..."] for name, kind in EVAL_FORMATS[task][1].items()})


def predict(model: EvalModel, model_path: Path | str, rows: Sequence[Row]) -> list[Any]:
    """One prediction per row: a label, a tag list, an answer text or a token, as the service would answer."""
    session = ort_session(model_path)
    try:
        if model.task == "text-classification":
            return _predict_labels(model, session, rows)
        if model.task == "token-classification":
            return _predict_tags(model, session, rows)
        if model.task == "question-answering":
            return _predict_answers(model, session, rows)
        if model.task == "fill-mask":
            return _predict_masked_tokens(model, session, rows)
    except DecodeInputError as exc:
        raise EvalDataError(f"eval data does not fit the model: {exc}") from exc
    raise EvalDataError(f"task {model.task} has no eval metric")


def score(task: str, rows: Sequence[Row], predictions: Sequence[Any]) -> float:
    """The task's metric over the rows, in percent."""
    if task == "text-classification":
        return 100.0 * accuracy([row["label"] for row in rows], list(predictions))
    if task == "token-classification":
        return 100.0 * entity_metrics([row["tags"] for row in rows], predictions)["f1"]
    if task == "question-answering":
        answers = {str(index): row["answers"] for index, row in enumerate(rows)}
        return squad_metrics({str(index): text for index, text in enumerate(predictions)}, answers)["f1"]
    if task == "fill-mask":
        return 100.0 * accuracy([row["target"] for row in rows], list(predictions))
    raise EvalDataError(f"task {task} has no eval metric")


def _run_rows(model: EvalModel, session: Any, rows: Sequence[tuple[list[int], list[int]]]) -> list[dict[str, Any]]:
    """Per-row outputs of the graph (token-level outputs cut to the row's length), in batches."""
    token_level = task_spec(model.task).token_level
    results: list[dict[str, Any]] = []
    for start in range(0, len(rows), EVAL_BATCH_ROWS):
        padded = pad_rows(rows[start : start + EVAL_BATCH_ROWS], model.pad_token_id, model.use_token_types)
        outputs = run_session(session, padded.feeds)
        for row, length in enumerate(padded.lengths):
            results.append(
                {name: (array[row, :length] if name in token_level else array[row]) for name, array in outputs.items()}
            )
    return results


Window = tuple[list[int], list[int]]  # (input_ids, token_type_ids) of one window the graph runs on


def _text_windows(model: EvalModel, rows: Sequence[Row]) -> list[Window]:
    """One window per row, as text-classification and fill-mask encode them (text, optional text_pair)."""
    tokenizer = windowing_tokenizer(model.tokenizer, model.max_length)
    encodings = [
        tokenizer.encode(row["text"], row["text_pair"]) if row.get("text_pair") else tokenizer.encode(row["text"])
        for row in rows
    ]
    return [(encoding.ids, encoding.type_ids) for encoding in encodings]


def _word_windows(model: EvalModel, rows: Sequence[Row]) -> tuple[list[Any], list[Window]]:
    stride = window_stride(model.tokenizer, model.max_length)
    tokenizer = windowing_tokenizer(model.tokenizer, model.max_length, stride)
    encoded = encode_word_lists(tokenizer, [row["words"] for row in rows])
    return encoded, [(window.ids, window.type_ids) for item in encoded for window in item.windows]


def _answer_windows(model: EvalModel, rows: Sequence[Row]) -> tuple[list[Any], list[Window]]:
    max_seq_len, doc_stride = resolve_window(model.max_length)
    pairs = [(row["question"], row["context"]) for row in rows]
    check_room_for_context(plain_tokenizer(model.tokenizer), pairs, max_seq_len, doc_stride)
    tokenizer = windowing_tokenizer(model.tokenizer, max_seq_len, doc_stride, "only_second")
    encoded = encode_question_contexts(tokenizer, pairs, model.cls_token_id)
    return encoded, [(window.ids, window.type_ids) for item in encoded for window in item.windows]


def row_windows(model: EvalModel, rows: Sequence[Row]) -> list[Window]:
    """Every window the graph runs on to predict ``rows``, as the service windows them (static int8 calibrates on
    these)."""
    if model.task in ("text-classification", "fill-mask"):
        return _text_windows(model, rows)
    if model.task == "token-classification":
        return _word_windows(model, rows)[1]
    if model.task == "question-answering":
        return _answer_windows(model, rows)[1]
    raise EvalDataError(f"task {model.task} has no eval rows")


def _predict_labels(model: EvalModel, session: Any, rows: Sequence[Row]) -> list[str]:
    outputs = _run_rows(model, session, _text_windows(model, rows))
    best = [int(np.argmax(output["logits"])) for output in outputs]
    return [model.id2label.get(label, f"LABEL_{label}") for label in best]


def _predict_tags(model: EvalModel, session: Any, rows: Sequence[Row]) -> list[list[str]]:
    encoded, windows = _word_windows(model, rows)
    logits = [output["logits"] for output in _run_rows(model, session, windows)]
    tags, offset = [], 0
    for item in encoded:
        count = len(item.windows)
        tags.append([word["entity"] for word in label_words(item, logits[offset : offset + count], model.id2label)])
        offset += count
    return tags


def _predict_answers(model: EvalModel, session: Any, rows: Sequence[Row]) -> list[str]:
    encoded, windows = _answer_windows(model, rows)
    outputs = _run_rows(model, session, windows)
    answers, offset = [], 0
    for item in encoded:
        mine = outputs[offset : offset + len(item.windows)]
        offset += len(item.windows)
        best = decode_qa_answers(item, [out["start_logits"] for out in mine], [out["end_logits"] for out in mine])
        answers.append(best[0]["answer"] if best else "")
    return answers


def _predict_masked_tokens(model: EvalModel, session: Any, rows: Sequence[Row]) -> list[str]:
    mask_id = model.tokenizer.token_to_id(model.mask_token)
    if mask_id is None:
        raise EvalDataError(f"the tokenizer lacks the mask token {model.mask_token!r}")
    windows = _text_windows(model, rows)
    positions = []
    for number, (row, (ids, _)) in enumerate(zip(rows, windows, strict=True), start=1):
        if model.tokenizer.token_to_id(row["target"]) is None:
            raise EvalDataError(f"eval row {number}: target {row['target']!r} is not a vocabulary token")
        found = [index for index, token in enumerate(ids) if token == mask_id]
        if len(found) != 1:
            raise EvalDataError(f"eval row {number}: needs exactly one {model.mask_token} within the model's length")
        positions.append(found[0])
    outputs = _run_rows(model, session, windows)
    best = [int(np.argmax(output["logits"][position])) for output, position in zip(outputs, positions, strict=True)]
    return [model.tokenizer.id_to_token(token) or "" for token in best]


def measure_int8_loss(
    model: EvalModel, fp32_path: Path, int8_path: Path, rows: Sequence[Row], max_loss: float | None
) -> dict[str, Any]:
    """Score the fp32 and the int8 graph on ``rows``; ``int8_accepted`` unless the loss exceeds ``max_loss``."""
    fp32 = predict(model, fp32_path, rows)
    int8 = predict(model, int8_path, rows)
    fp32_score, int8_score = score(model.task, rows, fp32), score(model.task, rows, int8)
    loss = fp32_score - int8_score
    return {
        "metric": metric_name(model.task),
        "rows": len(rows),
        "fp32": round(fp32_score, 4),
        "int8": round(int8_score, 4),
        "loss": round(loss, 4),
        "max_loss": max_loss,
        "changed_predictions": sum(a != b for a, b in zip(fp32, int8, strict=True)),
        "int8_accepted": max_loss is None or loss <= max_loss,
    }
