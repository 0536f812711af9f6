"""benchmarks.studies.zero_shot_nli: the templated entailment pairs, built from a small data folder written here."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.datasets import DATA_DIR_ENV
from benchmarks.studies import zero_shot_nli, zero_shot_report


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.tsv").write_text(
        "sentence\tlabel\n"
        "a warm , funny and moving film about friendship \t1\n"
        "too short \t0\n"
        "the plot is dull and the acting is wooden throughout \t0\n"
    )
    (tmp_path / "conll2003").mkdir()
    (tmp_path / "conll2003" / "train.txt").write_text(
        "-DOCSTART- -X- -X- O\n\n"
        "Angela NNP B-NP B-PER\nMerkel NNP I-NP I-PER\nvisited VBD B-VP O\nParis NNP B-NP B-LOC\n. . O O\n\n"
        "It PRP B-NP O\nrained VBD B-VP O\n. . O O\n"
    )
    articles = [
        {"title": f"Article_{a}", "paragraphs": [{"context": f"paragraph {p} of article {a}", "qas": []}
                                                 for p in range(zero_shot_report.TOPIC_PARAGRAPHS + 2)]}
        for a in range(3)
    ]  # fmt: skip
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "dev-subset.json").write_text(json.dumps({"version": "1.1", "data": articles}))
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    return tmp_path


def test_entities_are_read_as_whole_spans_with_their_type() -> None:
    words = ("Angela", "Merkel", "met", "the", "New", "York", "Times", "in", "Paris")
    tags = ("B-PER", "I-PER", "O", "O", "B-ORG", "I-ORG", "I-ORG", "O", "I-LOC")
    spans = zero_shot_nli.datasets_entities(words, tags)
    assert spans == [("Angela Merkel", "PER"), ("New York Times", "ORG"), ("Paris", "LOC")]


def test_each_sentiment_sentence_gets_its_own_hypothesis_and_the_other(data: Path) -> None:
    pairs = zero_shot_nli.sentiment_pairs(random.Random(0))
    assert {premise for premise, _, _ in pairs} == {
        "a warm , funny and moving film about friendship",
        "the plot is dull and the acting is wooden throughout",
    }  # "too short" has fewer than 6 words
    templates = dict(zero_shot_nli.SENTIMENT_TEMPLATES)
    for premise, hypothesis, label in pairs:
        positive = "warm" in premise
        says_positive = hypothesis in templates
        assert (label == "entailment") == (positive == says_positive)


def test_entity_pairs_name_the_true_type_once_and_another_once(data: Path) -> None:
    pairs = zero_shot_nli.entity_pairs(random.Random(0))
    assert len(pairs) == 2 and pairs[0][0] == "Angela Merkel visited Paris ."
    entailed = [hypothesis for _, hypothesis, label in pairs if label == "entailment"]
    assert entailed in (["Angela Merkel is a person."], ["Paris is a place."])
    other = next(hypothesis for _, hypothesis, label in pairs if label == "not_entailment")
    assert other.split(" is ")[0] == entailed[0].split(" is ")[0] and other != entailed[0]


def test_topic_pairs_leave_out_the_paragraphs_of_the_topic_test(data: Path) -> None:
    pairs = zero_shot_nli.topic_pairs(random.Random(0))
    premises = {premise for premise, _, _ in pairs}
    held_out = {f"paragraph {p} of article {a}" for a in range(3) for p in range(zero_shot_report.TOPIC_PARAGRAPHS)}
    assert premises and not premises & held_out
    for premise, hypothesis, label in pairs:
        own = premise.endswith(hypothesis.removeprefix("This example is about Article ").rstrip("."))
        assert (label == "entailment") == own
