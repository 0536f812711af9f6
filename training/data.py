"""Data files -> model features for text classification, token classification and fill-mask.

Every reader raises `DataError` with one line that names the file and the problem, so the CLI can stop
without a traceback. Features are plain dicts of int lists; `collate` pads a list of them into tensors.
SQuAD lives in `training/squad.py`, MLM masking and NSP pairs in `training/pretrain_data.py`.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from contract.files import read_jsonl
from contract.onnx_io import pad_rows

IGNORE_INDEX = -100
# What collate pads per-token keys other than input_ids / token_type_ids with (others: 0).
PAD_VALUES = {"labels": IGNORE_INDEX, "special_tokens_mask": 1}

TEXT_COLUMN_CANDIDATES = ("sentence", "text", "sentence1", "question1", "premise", "question", "content")
PAIR_COLUMN_CANDIDATES = ("sentence2", "text_pair", "question2", "hypothesis")
LABEL_COLUMN_CANDIDATES = ("label", "labels", "gold_label", "class", "target")

Feature = dict[str, list[int]]


class DataError(ValueError):
    """A data file cannot be used; the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class ClassificationRow:
    text: str
    text_pair: str | None
    label: str


@dataclass(frozen=True)
class TaggedSentence:
    tokens: list[str]
    tags: list[str]


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")


def _pick_column(path: Path, columns: Sequence[str], wanted: str | None, candidates: Sequence[str], role: str) -> str:
    if wanted is not None:
        if wanted not in columns:
            raise DataError(f"{path}: no {role} column {wanted!r} (columns: {', '.join(columns)})")
        return wanted
    for name in candidates:
        if name in columns:
            return name
    raise DataError(
        f"{path}: no {role} column found (looked for {', '.join(candidates)}; columns: {', '.join(columns)}); "
        f"name it with --{role.replace(' ', '-')}-column"
    )


def _read_table(path: Path) -> list[dict[str, str]]:
    """CSV (quoted), TSV (GLUE style: no quoting) or JSONL, chosen by the file extension."""
    _require_file(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return [record for _, record in read_jsonl(path, DataError)]
    # GLUE TSVs contain bare quote characters (RTE), so they must be read without quote handling.
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with path.open(encoding="utf-8", newline="") as handle:
        if suffix == ".tsv":
            reader = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.DictReader(handle)
        if not reader.fieldnames:
            raise DataError(f"{path}: the file has no header row")
        rows = list(reader)
    return rows


def read_classification_rows(
    path: Path,
    text_column: str | None = None,
    text_pair_column: str | None = None,
    label_column: str | None = None,
    max_rows: int | None = None,
) -> list[ClassificationRow]:
    """Rows of a CSV/TSV/JSONL file; columns are auto-detected (GLUE SST-2 and RTE names) unless named."""
    records = _read_table(path)
    if not records:
        raise DataError(f"{path}: the file has a header but no rows")
    columns = list(records[0].keys())
    text_key = _pick_column(path, columns, text_column, TEXT_COLUMN_CANDIDATES, "text")
    label_key = _pick_column(path, columns, label_column, LABEL_COLUMN_CANDIDATES, "label")
    pair_key: str | None
    if text_pair_column is not None:
        pair_key = _pick_column(path, columns, text_pair_column, (), "text pair")
    else:
        pair_key = next((name for name in PAIR_COLUMN_CANDIDATES if name in columns and name != text_key), None)
    rows: list[ClassificationRow] = []
    for line_number, record in enumerate(records[:max_rows] if max_rows else records, 2):
        text, label = record.get(text_key), record.get(label_key)
        pair = record.get(pair_key) if pair_key else None
        if text is None or label is None or (pair_key is not None and pair is None):
            raise DataError(f"{path}: row {line_number} has fewer fields than the header")
        rows.append(ClassificationRow(str(text).strip(), None if pair is None else str(pair).strip(), str(label)))
    return rows


def label_list(observed: Iterable[str], explicit: Sequence[str] | None = None) -> list[str]:
    """The label order: explicit when given, else sorted (numerically when every label is an integer)."""
    if explicit:
        return list(explicit)
    unique = set(observed)
    if all(label.lstrip("-").isdigit() for label in unique):
        return sorted(unique, key=int)
    return sorted(unique)


def check_labels(path: Path, observed: Iterable[str], known: Sequence[str], what: str = "label") -> None:
    unknown = sorted(set(observed) - set(known))
    if unknown:
        shown = ", ".join(repr(label) for label in unknown[:5])
        raise DataError(f"{path}: unknown {what} {shown} (known: {', '.join(known)})")


def encode_classification(
    rows: Sequence[ClassificationRow], tokenizer: Tokenizer, label2id: dict[str, int], max_length: int
) -> list[Feature]:
    tokenizer.enable_truncation(max_length, strategy="longest_first")
    try:
        pairs = [row.text if row.text_pair is None else (row.text, row.text_pair) for row in rows]
        encodings = tokenizer.encode_batch(pairs)
    finally:
        tokenizer.no_truncation()
    return [
        {"input_ids": list(enc.ids), "token_type_ids": list(enc.type_ids), "labels": [label2id[row.label]]}
        for enc, row in zip(encodings, rows, strict=True)
    ]


def read_tagged_sentences(path: Path, tag_column: int = -1, max_sentences: int | None = None) -> list[TaggedSentence]:
    """CoNLL (token per line, blank line between sentences, -DOCSTART- skipped) or JSONL {tokens, tags}."""
    _require_file(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        sentences = []
        for line_number, record in enumerate(_read_table(path), 1):
            tokens, tags = record.get("tokens"), record.get("tags", record.get("ner_tags"))
            if not isinstance(tokens, list) or not isinstance(tags, list):
                raise DataError(f"{path}: record {line_number} needs the lists 'tokens' and 'tags'")
            if len(tokens) != len(tags):
                raise DataError(f"{path}: record {line_number} has {len(tokens)} tokens but {len(tags)} tags")
            sentences.append(TaggedSentence([str(t) for t in tokens], [str(t) for t in tags]))
    else:
        sentences = _read_conll(path, tag_column)
    if not sentences:
        raise DataError(f"{path}: no sentences found")
    return sentences[:max_sentences] if max_sentences else sentences


def _read_conll(path: Path, tag_column: int) -> list[TaggedSentence]:
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if tokens:
                    sentences.append(TaggedSentence(tokens, tags))
                tokens, tags = [], []
                continue
            if len(fields) < 2:
                raise DataError(f"{path}:{line_number}: expected a token and a tag, got {line.strip()!r}")
            try:
                tag = fields[tag_column]
            except IndexError:
                raise DataError(f"{path}:{line_number}: no tag column {tag_column} in {line.strip()!r}") from None
            tokens.append(fields[0])
            tags.append(tag)
    if tokens:
        sentences.append(TaggedSentence(tokens, tags))
    return sentences


def encode_token_classification(
    sentences: Sequence[TaggedSentence],
    tokenizer: Tokenizer,
    label2id: dict[str, int],
    max_length: int,
    label_subwords: bool = False,
) -> list[Feature]:
    """Label the first sub-token of each word; special tokens get IGNORE_INDEX, and so do later sub-tokens unless
    ``label_subwords``: then they get the word's inside tag (B-X -> I-X), which the pipeline's "simple"
    aggregation reads, as it labels every sub-token on its own."""
    tokenizer.enable_truncation(max_length)
    try:
        encodings = tokenizer.encode_batch([s.tokens for s in sentences], is_pretokenized=True)
    finally:
        tokenizer.no_truncation()
    features = []
    for encoding, sentence in zip(encodings, sentences, strict=True):
        labels = []
        previous_word: int | None = None
        for word_id in encoding.word_ids:
            if word_id is None or (word_id == previous_word and not label_subwords):
                labels.append(IGNORE_INDEX)
            elif word_id == previous_word:
                labels.append(label2id[inside_tag(sentence.tags[word_id], label2id)])
            else:
                labels.append(label2id[sentence.tags[word_id]])
            previous_word = word_id
        features.append({"input_ids": list(encoding.ids), "token_type_ids": list(encoding.type_ids), "labels": labels})
    return features


def inside_tag(tag: str, label2id: dict[str, int]) -> str:
    """The tag a word's later sub-tokens carry: B-X -> I-X (when I-X is a label), anything else unchanged."""
    if tag.startswith("B-") and f"I-{tag[2:]}" in label2id:
        return f"I-{tag[2:]}"
    return tag


def read_text_lines(path: Path, max_lines: int | None = None) -> list[str]:
    """Plain text, one passage per line; blank lines are skipped."""
    _require_file(path)
    with path.open(encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()]
    if not lines:
        raise DataError(f"{path}: no text found (only blank lines)")
    return lines[:max_lines] if max_lines else lines


def encode_text_lines(lines: Sequence[str], tokenizer: Tokenizer, max_length: int) -> list[Feature]:
    tokenizer.enable_truncation(max_length)
    try:
        encodings = tokenizer.encode_batch(list(lines))
    finally:
        tokenizer.no_truncation()
    return [
        {
            "input_ids": list(enc.ids),
            "token_type_ids": list(enc.type_ids),
            "special_tokens_mask": list(enc.special_tokens_mask),
        }
        for enc in encodings
    ]


def collate(features: Sequence[Feature], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Pad per-token keys to the longest feature in the batch; one-value keys (a class label) become a vector.

    input_ids (padded with ``pad_token_id``, the tokenizer's pad token), token_type_ids and attention_mask are
    padded by ``contract.onnx_io.pad_rows``, as the exported graph and the service are fed; other per-token keys
    are padded with their own value (labels -100, special_tokens_mask 1, else 0). Every tensor is int64, but float
    one-value keys (relevance targets), which are float32.
    """
    if not features:
        raise ValueError("collate needs at least one feature")
    padded = pad_rows(
        [(f["input_ids"], f.get("token_type_ids", [0] * len(f["input_ids"]))) for f in features], pad_token_id
    )
    longest = padded.input_ids.shape[1]
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        if key in ("input_ids", "token_type_ids"):
            batch[key] = torch.from_numpy(padded.feeds[key])
        elif all(len(f[key]) == len(f["input_ids"]) for f in features):
            pad = PAD_VALUES.get(key, 0)
            batch[key] = torch.tensor([f[key] + [pad] * (longest - len(f[key])) for f in features], dtype=torch.long)
        elif all(len(f[key]) == 1 for f in features):
            values = [f[key][0] for f in features]
            dtype = torch.float32 if any(isinstance(value, float) for value in values) else torch.long
            batch[key] = torch.tensor(values, dtype=dtype)
        else:
            raise ValueError(f"feature key {key!r} is neither per-token nor a single value")
    batch["attention_mask"] = torch.from_numpy(padded.attention_mask)
    return batch
