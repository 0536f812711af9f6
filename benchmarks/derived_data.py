"""Data files the accuracy recipes derive from the shared data, under runs/accuracy/data (never committed)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.datasets import REPO_ROOT, shared_data_dir

GENERATED_DATA = REPO_ROOT / "runs" / "accuracy" / "data"
WIKITEXT_HELDOUT_FRACTION = 0.1


def is_wikitext_heading(line: str) -> bool:
    """`` = Title = `` / `` = = Section = = ``: WikiText's headings, not text to mask."""
    text = line.strip()
    return text.startswith("= ") and text.endswith(" =")


def write_if_changed(path: Path, lines: list[str]) -> None:
    """Keeps the file (and its mtime) when it already holds exactly these lines."""
    text = "".join(f"{line}\n" for line in lines)
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        path.write_text(text, encoding="utf-8")


def wikitext_split() -> Path:
    """runs/accuracy/data/wikitext-train.txt and wikitext-heldout.txt from $DATA/wikitext2/valid.txt.

    The shared data has WikiText-2's valid split only: its non-empty, non-heading lines (paragraphs), first 90%
    to train on, last 10% held out. Returns the folder they are written to.
    """
    source = shared_data_dir() / "wikitext2" / "valid.txt"
    lines = [line.strip() for line in source.read_text(encoding="utf-8").splitlines()]
    paragraphs = [line for line in lines if line and not is_wikitext_heading(line)]
    cut = len(paragraphs) - round(len(paragraphs) * WIKITEXT_HELDOUT_FRACTION)
    GENERATED_DATA.mkdir(parents=True, exist_ok=True)
    write_if_changed(GENERATED_DATA / "wikitext-train.txt", paragraphs[:cut])
    write_if_changed(GENERATED_DATA / "wikitext-heldout.txt", paragraphs[cut:])
    return GENERATED_DATA
