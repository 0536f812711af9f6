from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from training.data import (
    IGNORE_INDEX,
    DataError,
    TaggedSentence,
    check_labels,
    collate,
    encode_classification,
    encode_token_classification,
    label_list,
    read_classification_rows,
    read_tagged_sentences,
    read_text_lines,
)


def test_sst2_style_tsv_is_read_without_flags(tmp_path: Path) -> None:
    path = tmp_path / "train.tsv"
    path.write_text('sentence\tlabel\nhide new secretions from the parental units \t0\na " quoted " film \t1\n')
    rows = read_classification_rows(path)
    assert [(r.text, r.text_pair, r.label) for r in rows] == [
        ("hide new secretions from the parental units", None, "0"),
        ('a " quoted " film', None, "1"),
    ]


def test_rte_style_tsv_with_bare_quotes_keeps_every_row(tmp_path: Path) -> None:
    lines = [
        ("0", 'He said "no way', "He refused.", "not_entailment"),
        ("1", "Plain sentence.", 'A "quote" inside', "entailment"),
        ("2", "Third row.", "Still here.", "entailment"),
    ]
    path = tmp_path / "dev.tsv"
    path.write_text("index\tsentence1\tsentence2\tlabel\n" + "".join("\t".join(line) + "\n" for line in lines))
    rows = read_classification_rows(path)
    assert [(r.text, r.text_pair, r.label) for r in rows] == [(a, b, c) for _, a, b, c in lines]


def test_csv_and_jsonl_with_named_columns(tmp_path: Path) -> None:
    csv_path = tmp_path / "data.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["review", "stars"])
        writer.writerow(["good, really good", "5"])
    rows = read_classification_rows(csv_path, text_column="review", label_column="stars")
    assert (rows[0].text, rows[0].label) == ("good, really good", "5")
    jsonl_path = tmp_path / "data.jsonl"
    jsonl_path.write_text(json.dumps({"text": "a", "text_pair": "b", "label": "yes"}) + "\n\n")
    rows = read_classification_rows(jsonl_path)
    assert (rows[0].text, rows[0].text_pair, rows[0].label) == ("a", "b", "yes")


@pytest.mark.parametrize(
    ("content", "kwargs", "expected"),
    [
        ("sentence\tlabel\nx\t0\n", {"label_column": "gold"}, "no label column 'gold'"),
        ("words\tlabel\nx\t0\n", {}, "no text column found"),
        ("", {}, "the file is empty"),
        ("sentence\tlabel\n", {}, "no rows"),
    ],
)
def test_bad_classification_files_name_the_file(tmp_path: Path, content: str, kwargs: dict, expected: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(DataError) as caught:
        read_classification_rows(path, **kwargs)
    assert str(path) in str(caught.value) and expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_label_order_and_unknown_labels(tmp_path: Path) -> None:
    assert label_list(["10", "2", "1"]) == ["1", "2", "10"]
    assert label_list(["pos", "neg"]) == ["neg", "pos"]
    assert label_list(["pos", "neg"], explicit=["pos", "neg"]) == ["pos", "neg"]
    with pytest.raises(DataError, match="unknown label 'maybe'"):
        check_labels(tmp_path / "eval.tsv", ["yes", "maybe"], ["no", "yes"])


def test_classification_pairs_get_segment_ids_and_truncation(tiny_wordpiece) -> None:
    rows = read_rows_inline()
    features = encode_classification(rows, tiny_wordpiece, {"0": 0, "1": 1}, max_length=8)
    ids, type_ids = features[0]["input_ids"], features[0]["token_type_ids"]
    first_sep = ids.index(tiny_wordpiece.token_to_id("[SEP]"))
    assert len(ids) == 8 and len(tiny_wordpiece.encode(rows[0].text, rows[0].text_pair).ids) > 8
    assert type_ids == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    assert first_sep < len(ids) - 2
    assert features[1]["input_ids"] == tiny_wordpiece.encode(rows[1].text).ids
    assert [f["labels"] for f in features] == [[1], [0]]


def read_rows_inline():
    from training.data import ClassificationRow

    return [
        ClassificationRow("the quick brown fox jumps over", "the lazy dog", "1"),
        ClassificationRow("a great movie", None, "0"),
    ]


def test_conll_reader_skips_docstart_and_uses_last_column(tmp_path: Path) -> None:
    path = tmp_path / "train.txt"
    path.write_text(
        "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n"
        "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n"
    )
    sentences = read_tagged_sentences(path)
    assert sentences == [
        TaggedSentence(["EU", "rejects"], ["B-ORG", "O"]),
        TaggedSentence(["Peter", "Blackburn"], ["B-PER", "I-PER"]),
    ]
    chunk_tags = read_tagged_sentences(path, tag_column=2)
    assert chunk_tags[1].tags == ["B-NP", "I-NP"]


def test_tagged_jsonl_and_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "ner.jsonl"
    path.write_text(json.dumps({"tokens": ["Paris"], "tags": ["B-LOC"]}) + "\n")
    assert read_tagged_sentences(path) == [TaggedSentence(["Paris"], ["B-LOC"])]
    path.write_text(json.dumps({"tokens": ["Paris", "x"], "tags": ["B-LOC"]}) + "\n")
    with pytest.raises(DataError, match="2 tokens but 1 tags"):
        read_tagged_sentences(path)
    empty = tmp_path / "empty.txt"
    empty.write_text("-DOCSTART- -X- -X- O\n\n")
    with pytest.raises(DataError, match="no sentences"):
        read_tagged_sentences(empty)


def test_first_subtoken_gets_the_tag_and_the_rest_are_ignored(tiny_wordpiece) -> None:
    sentence = TaggedSentence(["Unbelievable", "Brussels", "transformations", "fox"], ["O", "B-LOC", "B-MISC", "O"])
    label2id = {"O": 0, "B-LOC": 1, "B-MISC": 2}
    [feature] = encode_token_classification([sentence], tiny_wordpiece, label2id, max_length=64)
    expected = [IGNORE_INDEX]
    for word, tag in zip(sentence.tokens, sentence.tags, strict=True):
        pieces = len(tiny_wordpiece.encode(word, add_special_tokens=False).ids)
        expected += [label2id[tag]] + [IGNORE_INDEX] * (pieces - 1)
    expected.append(IGNORE_INDEX)
    assert any(len(tiny_wordpiece.encode(w, add_special_tokens=False).ids) > 1 for w in sentence.tokens)
    assert feature["labels"] == expected
    assert len(feature["labels"]) == len(feature["input_ids"])


def test_label_subwords_gives_later_subtokens_the_inside_tag(tiny_wordpiece) -> None:
    sentence = TaggedSentence(["Unbelievable", "Brussels", "transformations", "fox"], ["O", "B-LOC", "B-MISC", "O"])
    label2id = {"O": 0, "B-LOC": 1, "I-LOC": 2, "B-MISC": 3}
    [feature] = encode_token_classification(
        [sentence], tiny_wordpiece, label2id, max_length=64, label_subwords=True
    )
    inside = {"O": "O", "B-LOC": "I-LOC", "B-MISC": "B-MISC"}  # no I-MISC label: the B tag is kept
    expected = [IGNORE_INDEX]
    for word, tag in zip(sentence.tokens, sentence.tags, strict=True):
        pieces = len(tiny_wordpiece.encode(word, add_special_tokens=False).ids)
        expected += [label2id[tag]] + [label2id[inside[tag]]] * (pieces - 1)
    expected.append(IGNORE_INDEX)
    assert sum(len(tiny_wordpiece.encode(w, add_special_tokens=False).ids) > 1 for w in sentence.tokens[1:3]) >= 1
    assert feature["labels"] == expected


def test_text_lines_skip_blanks(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text("first passage\n\n  \nsecond passage\n")
    assert read_text_lines(path) == ["first passage", "second passage"]
    path.write_text("\n\n")
    with pytest.raises(DataError, match="no text"):
        read_text_lines(path)


def test_collate_pads_tokens_and_stacks_single_labels() -> None:
    batch = collate(
        [
            {"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "labels": [1]},
            {"input_ids": [2, 3], "token_type_ids": [0, 0], "labels": [0]},
        ],
        pad_token_id=0,
    )
    assert batch["input_ids"].tolist() == [[2, 7, 3], [2, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [1, 0]
    token_batch = collate(
        [{"input_ids": [2, 3], "labels": [-100, -100]}, {"input_ids": [2, 5, 3], "labels": [-100, 4, -100]}],
        pad_token_id=0,
    )
    assert token_batch["labels"].tolist() == [[-100, -100, -100], [-100, 4, -100]]
    assert token_batch["labels"].dtype == torch.long
    assert "token_type_ids" not in token_batch  # only the keys the features have, plus attention_mask


def collate_as_before(features: list[dict[str, list[int]]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """The torch-only collate that the pad_rows one replaced: the reference its output must equal bit for bit."""
    longest = max(len(f["input_ids"]) for f in features)
    pad_values = {"input_ids": pad_token_id, "labels": IGNORE_INDEX, "special_tokens_mask": 1}
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        if all(len(f[key]) == len(f["input_ids"]) for f in features):
            pad = pad_values.get(key, 0)
            batch[key] = torch.tensor([f[key] + [pad] * (longest - len(f[key])) for f in features], dtype=torch.long)
        else:
            batch[key] = torch.tensor([f[key][0] for f in features], dtype=torch.long)
    lengths = torch.tensor([len(f["input_ids"]) for f in features])
    batch["attention_mask"] = (torch.arange(longest)[None, :] < lengths[:, None]).long()
    return batch


@pytest.mark.parametrize("pad_token_id", [0, 7])
def test_collate_is_unchanged_by_padding_through_pad_rows(pad_token_id: int) -> None:
    mlm = [
        {"input_ids": [2, 10, 11, 3], "token_type_ids": [0, 0, 1, 1], "special_tokens_mask": [1, 0, 0, 1]},
        {"input_ids": [2, 3], "token_type_ids": [0, 0], "special_tokens_mask": [1, 1]},
        {"input_ids": [2, 12, 13, 14, 3], "token_type_ids": [0, 0, 0, 1, 1], "special_tokens_mask": [1, 0, 0, 0, 1]},
    ]
    tagged = [
        {"input_ids": [2, 20, 3], "token_type_ids": [0, 0, 0], "labels": [-100, 1, -100]},
        {"input_ids": [2, 21, 22, 23, 3], "token_type_ids": [0] * 5, "labels": [-100, 0, -100, 2, -100]},
    ]
    qa = [
        {"input_ids": [2, 30, 3, 31, 32, 3], "token_type_ids": [0, 0, 0, 1, 1, 1], "start_positions": [3],
         "end_positions": [4]},
        {"input_ids": [2, 30, 3, 33, 3], "token_type_ids": [0, 0, 0, 1, 1], "start_positions": [0],
         "end_positions": [0]},
    ]  # fmt: skip
    for features in (mlm, tagged, qa):
        actual, expected = collate(features, pad_token_id), collate_as_before(features, pad_token_id)
        assert list(actual) == list(expected)
        for key, tensor in expected.items():
            assert actual[key].dtype == torch.long and actual[key].shape == tensor.shape, key
            assert torch.equal(actual[key], tensor), key
            assert actual[key].is_contiguous()


def test_collate_pads_input_ids_with_the_given_pad_id_and_other_keys_with_their_own() -> None:
    features = [
        {"input_ids": [2, 7, 3], "token_type_ids": [0, 1, 1], "labels": [5, 6, 7], "special_tokens_mask": [1, 0, 1]},
        {"input_ids": [2, 3], "token_type_ids": [0, 0], "labels": [5, 7], "special_tokens_mask": [1, 1]},
    ]
    batch = collate(features, pad_token_id=9)
    assert batch["input_ids"].tolist() == [[2, 7, 3], [2, 3, 9]]
    assert batch["token_type_ids"].tolist() == [[0, 1, 1], [0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7], [5, 7, IGNORE_INDEX]]
    assert batch["special_tokens_mask"].tolist() == [[1, 0, 1], [1, 1, 1]]


def test_collate_needs_a_pad_id_and_a_feature() -> None:
    features = [{"input_ids": [2, 3], "token_type_ids": [0, 0]}]
    with pytest.raises(TypeError):
        collate(features)  # type: ignore[call-arg]  # no silent default of 0: the caller names the tokenizer's pad id
    with pytest.raises(ValueError, match="at least one feature"):
        collate([], pad_token_id=0)
