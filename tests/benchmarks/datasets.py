"""Readers for the shared evaluation data (../shared/data): the same inputs feed load, raw ORT and accuracy."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """``BERTSERVE_DATA`` or the ``shared/data`` folder beside the clone."""
    override = os.environ.get("BERTSERVE_DATA")
    folder = Path(override) if override else REPO_ROOT.parent / "shared" / "data"
    if not folder.is_dir():
        raise FileNotFoundError(f"shared data folder {folder} not found (set BERTSERVE_DATA)")
    return folder


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str
    text_pair: str | None = None


@dataclass(frozen=True)
class QaExample:
    id: str
    question: str
    context: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class NerSentence:
    words: tuple[str, ...]
    tags: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.words)


def read_sst2(split: str = "dev") -> list[LabelledText]:
    rows: list[LabelledText] = []
    with (shared_data_dir() / "sst2" / f"{split}.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            rows.append(LabelledText(text=row["sentence"].strip(), label=row["label"]))
    return rows


def read_rte(split: str = "dev") -> list[LabelledText]:
    rows: list[LabelledText] = []
    with (shared_data_dir() / "rte" / f"{split}.tsv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE):
            rows.append(LabelledText(text=row["sentence1"], text_pair=row["sentence2"], label=row["label"]))
    return rows


def squad_path() -> Path:
    return shared_data_dir() / "squad" / "dev-subset.json"


def read_squad(first_article: int = 0, end_article: int | None = None) -> list[QaExample]:
    """Questions of articles ``[first_article, end_article)`` (0-based, file order)."""
    articles = json.loads(squad_path().read_text(encoding="utf-8"))["data"][first_article:end_article]
    examples: list[QaExample] = []
    for article in articles:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answers = tuple(answer["text"] for answer in qa["answers"])
                examples.append(QaExample(qa["id"], qa["question"], paragraph["context"], answers))
    return examples


def conll_path(split: str = "valid") -> Path:
    return shared_data_dir() / "conll2003" / f"{split}.txt"


def read_conll(split: str = "valid") -> list[NerSentence]:
    sentences: list[NerSentence] = []
    words: list[str] = []
    tags: list[str] = []
    for line in conll_path(split).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("-DOCSTART-"):
            if words:
                sentences.append(NerSentence(tuple(words), tuple(tags)))
                words, tags = [], []
            continue
        columns = line.split()
        words.append(columns[0])
        tags.append(columns[-1])
    if words:
        sentences.append(NerSentence(tuple(words), tuple(tags)))
    return sentences
