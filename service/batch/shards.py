"""One batch input file over several processes (a Kubernetes Indexed Job's pods), and the join of their outputs.

Shard ``INDEX/COUNT`` answers the input's request lines whose number (0-based, blank lines not counted) is
``INDEX`` modulo ``COUNT``. Entry ids come from the line's number in the whole file, so a shard's entries are the
ones an unsharded run writes; the join puts every shard's entries back in input order, each line's once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from service.batch.lines import entry_id, plan_lines

INDEX_VARIABLE = "JOB_COMPLETION_INDEX"  # what a Kubernetes Indexed Job sets in each pod
ERRORS_SUFFIX = ".errors.jsonl"


@dataclass(frozen=True, slots=True)
class Shard:
    index: int
    count: int

    def owns(self, number: int) -> bool:
        return number % self.count == self.index


def parse_shard(text: str, environ: Mapping[str, str] = os.environ) -> Shard:
    """``INDEX/COUNT``, or ``COUNT`` alone with the index from ``$JOB_COMPLETION_INDEX``."""
    index_text, slash, count_text = text.rpartition("/")
    if not slash:
        index_text = environ.get(INDEX_VARIABLE, "")
        if not index_text:
            raise ValueError(f"--shard {text} gives no index and {INDEX_VARIABLE} is not set (use INDEX/COUNT)")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise ValueError(f"--shard takes INDEX/COUNT or COUNT (whole numbers), not {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {index}/{count}: the index must be 0 to {count - 1}")
    return Shard(index, count)


def errors_path(output: Path) -> Path:
    """Where a run's non-200 entries go when no --errors is given."""
    return output.with_name(output.name.removesuffix(".jsonl") + ERRORS_SUFFIX)


@dataclass(slots=True)
class Joined:
    lines: int = 0
    completed: int = 0
    failed: int = 0
    duplicates: int = 0  # entries of a line already found in another part
    foreign: int = 0  # entries of no line of this input (another input's, or another batch id's)
    missing: list[int] = field(default_factory=list)  # line numbers no part answered


def part_files(parts: Iterable[Path], exclude: Iterable[Path] = ()) -> list[Path]:
    """The files given, and every ``*.jsonl`` in the folders given (errors files included), but ``exclude``."""
    skip = {path.resolve() for path in exclude}
    files: list[Path] = []
    for part in parts:
        found = sorted(part.glob("*.jsonl")) if part.is_dir() else [part]
        files += [path for path in found if path.resolve() not in skip and path not in files]
    return files


def join(source: Path, parts: Iterable[Path], output: Path, errors: Path, batch_id: str) -> Joined:
    """Write each input line's entry once, in input order: 200s to ``output``, the rest to ``errors``.

    A partial last line in a part (a shard killed mid-write) is ignored; lines no part answered are listed in
    ``missing`` and written nowhere.
    """
    plan = plan_lines(source)
    numbers = {entry_id(batch_id, number): number for number in range(len(plan))}
    found: dict[int, tuple[Path, int, int, bool]] = {}
    result = Joined(lines=len(plan))
    for part in part_files(parts, exclude=(output, errors)):
        offset = 0
        with part.open("rb") as lines:
            for raw in lines:
                start, offset = offset, offset + len(raw)
                if not raw.endswith(b"\n") or not raw.strip():
                    continue
                entry = json.loads(raw)
                number = numbers.get(entry.get("id"))
                if number is None:
                    result.foreign += 1
                elif number in found:
                    result.duplicates += 1
                else:
                    response = entry.get("response") or {}
                    found[number] = (part, start, len(raw), response.get("status_code") == 200)
    result.missing = [number for number in range(len(plan)) if number not in found]
    output.parent.mkdir(parents=True, exist_ok=True)
    errors.parent.mkdir(parents=True, exist_ok=True)
    handles: dict[Path, BinaryIO] = {}
    answers_tmp, errors_tmp = output.with_name(output.name + ".tmp"), errors.with_name(errors.name + ".tmp")
    try:
        with answers_tmp.open("wb") as answers, errors_tmp.open("wb") as failures:
            for number in sorted(found):
                part, start, length, ok = found[number]
                reader = handles.get(part)
                if reader is None:
                    reader = handles[part] = part.open("rb")
                reader.seek(start)
                (answers if ok else failures).write(reader.read(length))
                result.completed += ok
                result.failed += not ok
            for target in (answers, failures):
                target.flush()
                os.fsync(target.fileno())
    finally:
        for reader in handles.values():
            reader.close()
    answers_tmp.replace(output)
    errors_tmp.replace(errors)
    return result
