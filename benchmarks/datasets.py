"""Readers for the shared evaluation data: the same inputs feed load, raw ORT, accuracy and speed.py.

Where the data is (the one place that decides it, ``shared_data_dir``):

1. ``$BERTSERVE_EVAL_DATA`` when it is set (the folder holding ``sst2/``, ``rte/``, ``squad/``, ``conll2003/``);
2. otherwise the first ``shared/data`` folder found walking up from the current working directory
   (``make bench`` runs from the repository root, so a ``shared/`` beside or above the clone is found).

A folder that does not exist is an error that says to set ``BERTSERVE_EVAL_DATA``; nothing is looked up
relative to this file.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]  # where the benchmarks run commands and keep runs/, not the data
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"  # what a benchmark commits
SCRATCH_DIR = REPO_ROOT / "benchmarks" / "scratch"  # what it builds and logs (ignored by git)
DATA_DIR_ENV = "BERTSERVE_EVAL_DATA"
DEFAULT_DATA_SUBDIR = Path("shared") / "data"


class DataDirNotFound(FileNotFoundError):
    """The evaluation data folder is missing."""


def shared_data_dir() -> Path:
    """The evaluation data folder: ``$BERTSERVE_EVAL_DATA``, else ``shared/data`` in the cwd or a parent of it."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        folder = Path(override).expanduser()
        if not folder.is_dir():
            raise DataDirNotFound(
                f"{DATA_DIR_ENV}={override} is not a folder: set {DATA_DIR_ENV} to the evaluation data folder "
                "(the one holding sst2/, rte/, squad/, conll2003/)"
            )
        return folder
    cwd = Path.cwd()
    for parent in (cwd, *cwd.parents):
        if (parent / DEFAULT_DATA_SUBDIR).is_dir():
            return parent / DEFAULT_DATA_SUBDIR
    raise DataDirNotFound(
        f"no {DEFAULT_DATA_SUBDIR} folder in {cwd} or any parent of it: set {DATA_DIR_ENV} to the evaluation data "
        "folder (the one holding sst2/, rte/, squad/, conll2003/)"
    )


@dataclass(frozen=True)
class LabelledText:
    text: str
    label: str
    text_pair: str | None = None

    def eval_row(self) -> dict[str, str]:
        """The row in model_export's --eval-data / --int8-calibration format."""
        return {"text": self.text, **({"text_pair": self.text_pair} if self.text_pair else {}), "label": self.label}


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
