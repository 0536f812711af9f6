"""Reading JSON and JSONL files, and the special tokens written in a checkpoint's JSON files. Torch-free.

Training (checkpoint and tokenizer loading) and the exporter read config.json, tokenizer_config.json,
special_tokens_map.json and model.safetensors.index.json the same way through these helpers; training's JSONL
data and the exporter's --eval-data rows go through ``read_jsonl``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

ErrorFactory = Callable[[str], Exception]


def read_json(
    path: Path | str, what: str = "JSON file", *, optional: bool = False, error: ErrorFactory = ValueError
) -> dict[str, Any]:
    """The JSON object in ``path``.

    ``optional``: an absent file reads as ``{}``; otherwise it is an error "``path``: no such ``what``".
    A file that is not UTF-8 JSON, or holds something other than an object, is an error too. Every error is
    ``error(message)`` (a ValueError unless the caller passes its own class), the message one line naming the file.
    """
    path = Path(path)
    if not path.is_file():
        if optional:
            return {}
        raise error(f"{path}: no such {what}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as decode_error:
        raise error(f"{path}: not valid JSON ({decode_error})") from decode_error
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object")
    return data


def read_jsonl(path: Path | str, error: ErrorFactory = ValueError) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file, one per non-blank line, each with its line number (from 1).

    A file that cannot be read or is not UTF-8, a line that is not JSON and one that holds something other than
    an object are ``error(message)``, the message one line naming the file (and the line: ``PATH line N: ...``).
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as read_error:
        raise error(f"{path}: cannot be read ({read_error})") from read_error
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as decode_error:
            raise error(f"{path} line {number}: not valid JSON ({decode_error.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{path} line {number}: expected a JSON object")
        records.append((number, record))
    return records


def tokenizer_settings(folder: Path | str, error: ErrorFactory = ValueError) -> dict[str, Any]:
    """special_tokens_map.json overlaid by tokenizer_config.json (as transformers merges them); absent files are {}."""
    folder = Path(folder)
    return {
        **read_json(folder / "special_tokens_map.json", optional=True, error=error),
        **read_json(folder / "tokenizer_config.json", optional=True, error=error),
    }


def token_text(value: Any, default: str) -> str:
    """The text of a special-token setting; ``default`` when the setting is absent (None).

    tokenizer_config.json / special_tokens_map.json write a special token as a plain string or as a serialised
    AddedToken (``{"content": "[PAD]", "lstrip": false, ...}``).
    """
    if isinstance(value, dict):
        return str(value.get("content", default))
    return default if value is None else str(value)
