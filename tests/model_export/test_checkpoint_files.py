"""Tokenizer, special tokens, max length and weights hash as read from a checkpoint folder."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from model_export.checkpoint_files import prepare_tokenizer, resolve_max_length, weights_sha256
from model_export.validate import ExportError
from tests.model_export.conftest import vocab_size, vocab_tokens, write_vocab

MIXED_CASE = ["John saw Mary in PARIS.", "Thé Movie wás GREAT!"]


def test_tokenizer_config_overrides_the_normalizer_like_transformers(
    tmp_path: Path, checkpoint: Callable[[str, str], Path]
) -> None:
    import shutil

    import transformers

    folder = tmp_path / "cased"
    shutil.copytree(checkpoint("ours", "text-classification"), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(do_lower_case=False, strip_accents=False)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer, _, do_lower_case, _ = prepare_tokenizer(folder, "text-classification", vocab_size())
    expected = transformers.AutoTokenizer.from_pretrained(folder)(MIXED_CASE)["input_ids"]
    assert [encoding.ids for encoding in tokenizer.encode_batch(MIXED_CASE)] == expected
    assert do_lower_case is False
    lowered, _, _, _ = prepare_tokenizer(checkpoint("ours", "text-classification"), "text-classification", 10**6)
    assert lowered.encode(MIXED_CASE[0]).ids != tokenizer.encode(MIXED_CASE[0]).ids


def test_special_tokens_come_from_the_tokenizer_files(tmp_path: Path) -> None:
    folder = tmp_path / "renamed"
    vocab = write_vocab(folder)
    vocab.write_text(vocab.read_text().replace("[MASK]", "<mask>"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<mask>"}))
    _, special, _, _ = prepare_tokenizer(folder, "fill-mask", vocab_size())
    assert special.mask_token == "<mask>" and special.cls_token == "[CLS]"


def test_fill_mask_needs_a_mask_token(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    folder = tmp_path / "no-mask"
    folder.mkdir()
    tokens = [token for token in vocab_tokens() if token != "[MASK]"]
    tokenizer = Tokenizer(models.WordPiece({token: index for index, token in enumerate(tokens)}, unk_token="[UNK]"))
    tokenizer.save(str(folder / "tokenizer.json"))
    with pytest.raises(ExportError, match=r"no mask_token '\[MASK\]'"):
        prepare_tokenizer(folder, "fill-mask", vocab_size())
    prepare_tokenizer(folder, "text-classification", vocab_size())


def test_a_tokenizer_larger_than_the_embedding_table_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "big"
    write_vocab(folder)
    with pytest.raises(ExportError, match=f"has {vocab_size()} tokens, the model's vocab_size is {vocab_size() - 1}"):
        prepare_tokenizer(folder, "text-classification", vocab_size() - 1)


def test_missing_tokenizer_is_an_export_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"neither tokenizer\.json nor vocab\.txt"):
        prepare_tokenizer(tmp_path, "text-classification", 100)


@pytest.mark.parametrize(
    ("requested", "model_max_length", "expected"),
    [(None, 64, 64), (None, 10**30, 128), (None, None, 128), (32, 64, 32), (128, 64, 128)],
)
def test_max_length(requested: int | None, model_max_length: int | None, expected: int) -> None:
    settings = {} if model_max_length is None else {"model_max_length": model_max_length}
    assert resolve_max_length(requested, settings, 128) == expected


def test_max_length_beyond_the_position_table_is_refused() -> None:
    with pytest.raises(ExportError, match=r"outside 2\.\.128"):
        resolve_max_length(129, {}, 128)


def test_weights_hash_covers_the_weight_files(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"legacy weights")
    assert weights_sha256(tmp_path) == hashlib.sha256(b"legacy weights").hexdigest()
    (tmp_path / "model-1.safetensors").write_bytes(b"one")
    (tmp_path / "model-2.safetensors").write_bytes(b"two")
    index = {"weight_map": {"a": "model-2.safetensors", "b": "model-1.safetensors", "c": "model-2.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    assert weights_sha256(tmp_path) == hashlib.sha256(b"onetwo").hexdigest()
    (tmp_path / "model.safetensors").write_bytes(b"single file")
    assert weights_sha256(tmp_path) == hashlib.sha256(b"single file").hexdigest()
