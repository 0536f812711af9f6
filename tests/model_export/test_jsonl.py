"""contract.files.read_jsonl: the one JSONL reader of training's data files and the exporter's --eval-data rows."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract.files import read_jsonl
from model_export.task_eval import EvalDataError, read_eval_rows
from training.data import DataError, read_classification_rows


def test_objects_come_with_their_line_numbers_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n  \n{"b": "x\u2028y"}\r\n', encoding="utf-8")
    assert read_jsonl(path) == [(1, {"a": 1}), (4, {"b": "x\u2028y"})]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"a": 1}\n{broken\n', "rows.jsonl line 2: not valid JSON"),
        (b'{"a": 1}\n[1, 2]\n', "rows.jsonl line 2: expected a JSON object"),
        (b'{"a": "\xff"}\n', "rows.jsonl: cannot be read"),
    ],
    ids=["not-json", "not-an-object", "not-utf8"],
)
def test_a_bad_line_or_file_is_the_callers_error_naming_file_and_line(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(problem)):
        read_jsonl(path)
    with pytest.raises(DataError, match=re.escape(problem)):
        read_classification_rows(path)
    with pytest.raises(EvalDataError, match=f"^eval data .*{re.escape(problem)}"):
        read_eval_rows(path, "text-classification")


def test_a_missing_file_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"absent\.jsonl: cannot be read"):
        read_jsonl(tmp_path / "absent.jsonl", error=KeyError)
