"""Cohere datasets' rows: an upload read into rows by its file name (``.jsonl``, ``.csv``, ``.txt`` split at
``text_separator``, ``.avro``), each row checked for the dataset type's required fields and cut to them and the fields
to preserve, and rows written to and read from Avro parts with fastavro (Cohere's dataset parts are Avro files: the
``cohere`` client reads them with fastavro too).

A malformed row fails the dataset's validation (``Malformed``), or, with ``skip_malformed_input``, is dropped with a
warning. Nothing here logs a row's content.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import fastavro

EMBED_INPUT, EMBED_RESULT = "embed-input", "embed-result"
REQUIRED_FIELDS = {EMBED_INPUT: ("text",)}  # the dataset types an upload may have, and the fields each row needs
FORMATS = (".jsonl", ".csv", ".txt", ".avro")
SCALAR: Any = ["null", "string", "long", "double", "boolean"]  # a preserved field's Avro type: any JSON scalar
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # Avro's names
MAX_WARNINGS = 10  # dropped rows named one by one; the rest counted
SAMPLES = 3  # rows a dataset part shows as samples
READ_BYTES = 1 << 20
# What fastavro raises on a file that is not Avro, or is damaged (found by mutating valid files: a damaged header,
# schema, block count or deflate block).
AVRO_ERRORS = (ValueError, EOFError, KeyError, IndexError, TypeError, zlib.error,
               fastavro.schema.SchemaParseException, fastavro.read.SchemaResolutionError)  # fmt: skip


class Malformed(ValueError):
    """The upload cannot be a dataset (its validation error), or one row is malformed."""


@dataclass(frozen=True, slots=True)
class RowRules:
    """What an upload's rows must hold and keep (the create call's query parameters)."""

    dataset_type: str
    keep_fields: tuple[str, ...] = ()  # kept; a row without one is malformed
    optional_fields: tuple[str, ...] = ()  # kept when present, else null
    skip_malformed_input: bool = False
    text_separator: str = "\n"
    csv_delimiter: str = ","
    max_text_bytes: int | None = None  # a required field's text, as JSON, past which no line could carry it

    @property
    def required(self) -> tuple[str, ...]:
        return REQUIRED_FIELDS[self.dataset_type]

    @property
    def preserved(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(name for name in (*self.keep_fields, *self.optional_fields)
                                   if name not in self.required))  # fmt: skip


@dataclass(slots=True)
class Validation:
    """What reading an upload found: rows kept, rows dropped and the warnings naming them."""

    rows: int = 0
    dropped: int = 0
    warnings: list[str] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)

    def drop(self, number: int, reason: str) -> None:
        self.dropped += 1
        if len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(f"row {number} was dropped: {reason}")

    def summary(self) -> list[str]:
        unnamed = self.dropped - len(self.warnings)
        return self.warnings + ([f"{unnamed} more rows were dropped"] if unnamed > 0 else [])


def input_schema(rules: RowRules) -> dict[str, Any]:
    """The Avro schema of an input dataset: its required fields (strings) and the preserved ones (nullable scalars)."""
    fields: list[dict[str, Any]] = [{"name": name, "type": "string"} for name in rules.required]
    fields += [{"name": name, "type": SCALAR, "default": None} for name in rules.preserved]
    return {"type": "record", "name": "EmbedInput", "fields": fields}


def result_schema(preserved: Iterable[str], embedding_types: Iterable[str]) -> dict[str, Any]:
    """An embed job's output rows: the text, one embedding per type asked for (base64: a string; float: doubles, the
    numbers the embed route answers; the others: integers) and the input's preserved fields."""
    kinds = [
        {"name": kind, "type": "string" if kind == "base64" else {"type": "array", "items": _item_type(kind)}}
        for kind in embedding_types
    ]
    embeddings = {"type": "record", "name": "Embeddings", "fields": kinds}
    fields: list[dict[str, Any]] = [{"name": "text", "type": "string"}, {"name": "embeddings", "type": embeddings}]
    fields += [{"name": name, "type": SCALAR, "default": None} for name in preserved]
    return {"type": "record", "name": "EmbedResult", "fields": fields}


def _item_type(kind: str) -> str:
    return "double" if kind == "float" else "int"


def check_field_names(names: Iterable[str]) -> None:
    for name in names:
        if not FIELD_NAME.fullmatch(name):
            raise Malformed(f"field name {name!r} is not taken: letters, digits and '_', not starting with a digit")


def write_rows(rules: RowRules, filename: str, upload: IO[bytes], target: Path) -> Validation:
    """Read ``upload`` into valid rows and write them to the Avro file ``target`` (blocking). Raises ``Malformed``
    (the validation error) for a format not taken, an unreadable file, a malformed row without
    ``skip_malformed_input``, or no rows at all."""
    validation = Validation()
    schema = fastavro.parse_schema(input_schema(rules))
    with target.open("wb") as out:
        fastavro.writer(out, schema, _checked(rules, _raw_rows(rules, filename, upload), validation))
    if validation.rows == 0:
        raise Malformed(
            "the file holds no valid rows" + (f" ({validation.dropped} dropped)" if validation.dropped else "")
        )
    return validation


def _checked(rules: RowRules, raws: Iterator[Any], validation: Validation) -> Iterator[dict[str, Any]]:
    for number, raw in enumerate(raws, 1):
        try:
            row = _row(rules, raw)
        except Malformed as why:
            if not rules.skip_malformed_input:
                raise Malformed(f"row {number}: {why} (skip_malformed_input=true drops such rows)") from None
            validation.drop(number, str(why))
            continue
        validation.rows += 1
        if len(validation.samples) < SAMPLES:
            validation.samples.append(json.dumps(row, ensure_ascii=False))
        yield row


def _row(rules: RowRules, raw: Any) -> dict[str, Any]:
    if isinstance(raw, Malformed):
        raise raw
    if not isinstance(raw, dict):
        raise Malformed("it is not an object")
    row = _fields(rules, raw)
    for name, value in row.items():
        if isinstance(value, str) and not _unicode(value):
            raise Malformed(f"field '{name}' holds a lone surrogate (not Unicode text)")
    return row


def _unicode(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _fields(rules: RowRules, raw: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in rules.required:
        value = raw.get(name)
        if not isinstance(value, str) or not value.strip():
            raise Malformed(f"'{name}' must be a non-empty string")
        if rules.max_text_bytes is not None and 6 * len(value) + 2 > rules.max_text_bytes:  # 6: the longest escape
            size = len(json.dumps(value, ensure_ascii=False).encode())  # as a line's body writes it
            if size > rules.max_text_bytes:
                raise Malformed(f"'{name}' takes {size} bytes as JSON; an embed request holds {rules.max_text_bytes}")
        row[name] = value
    for name in rules.preserved:
        value = raw.get(name)
        if name not in raw and name in rules.keep_fields:
            raise Malformed(f"kept field '{name}' is missing")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise Malformed(f"field '{name}' is not a string, number or boolean")
        if isinstance(value, int) and not -(2**63) <= value < 2**63:
            raise Malformed(f"field '{name}' is an integer past 64 bits")
        row[name] = value
    return row


def _raw_rows(rules: RowRules, filename: str, upload: IO[bytes]) -> Iterator[Any]:
    suffix = Path(filename).suffix.lower()
    if suffix == ".jsonl":
        return _jsonl(upload)
    if suffix == ".csv":
        return _csv(upload, rules.csv_delimiter)
    if suffix == ".txt":
        return ({"text": text} for text in _split(upload, rules.text_separator) if text.strip())
    if suffix == ".avro":
        return _avro(upload)
    raise Malformed(f"the file's name ends {suffix or 'with no extension'}: send one of {', '.join(FORMATS)}")


def _jsonl(upload: IO[bytes]) -> Iterator[Any]:
    for line in upload:
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError as exc:
                yield Malformed(f"it is not JSON ({exc})")
            except RecursionError:
                yield Malformed("it is nested too deeply")


def _csv(upload: IO[bytes], delimiter: str) -> Iterator[Any]:
    text = io.TextIOWrapper(upload, encoding="utf-8-sig", newline="")
    try:
        yield from csv.DictReader(text, delimiter=delimiter)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise Malformed(f"the CSV cannot be read: {exc}") from None
    finally:
        text.detach()


def _split(upload: IO[bytes], separator: str) -> Iterator[str]:
    """The file's text split at ``separator``, read a chunk at a time."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    pending = ""
    try:
        while chunk := upload.read(READ_BYTES):
            *whole, pending = (pending + decoder.decode(chunk)).split(separator)
            yield from whole
        yield pending + decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise Malformed(f"the text is not UTF-8: {exc}") from None


def _avro(upload: IO[bytes]) -> Iterator[Any]:
    try:
        yield from fastavro.reader(upload)
    except AVRO_ERRORS as exc:
        raise Malformed(f"the Avro file cannot be read: {type(exc).__name__}") from None


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """A part's rows, in order (blocking)."""
    with path.open("rb") as part:
        yield from fastavro.reader(part)  # type: ignore[misc]


def write_part(path: Path, schema: dict[str, Any], rows: Iterable[dict[str, Any]]) -> None:
    """Rows to the Avro file ``path`` (blocking; the caller syncs it before naming it)."""
    with path.open("wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema), rows)
        out.flush()
