"""Shared fixtures for training tests: tiny tokenizers and data files built locally (no downloads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers


def written(folder: Path, name: str, text: str) -> Path:
    """``folder / name`` holding ``text``: a small data file a test builds."""
    path = folder / name
    path.write_text(text)
    return path


TINY_CORPUS = [
    "the quick brown fox jumps over the lazy dog.",
    "Peter Blackburn visited Brussels on Monday. The European Commission said so.",
    "Unbelievable transformations happened internationally, said the reporter.",
    "A great movie with a wonderful cast. A terrible plot and awful acting.",
    "Where did the fox go? It went to the river bank near the old mill.",
]


@pytest.fixture(scope="session")
def tiny_wordpiece() -> Tokenizer:
    """A lower-casing BERT WordPiece tokenizer (vocab 200) trained on TINY_CORPUS, template [CLS] A [SEP] B [SEP]."""
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer.train_from_iterator(TINY_CORPUS * 3, trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))],
    )
    return tokenizer


# Tiny BERT dimensions for model/checkpoint tests: every head and code path, milliseconds per forward pass.
TINY_BERT_CONFIG = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
}


@pytest.fixture
def padded_batch() -> dict[str, torch.Tensor]:
    """Three rows of different lengths (11, 7, 3 real tokens), right-padded with 0, second segment type 1."""
    generator = torch.Generator().manual_seed(1234)
    input_ids = torch.randint(5, TINY_BERT_CONFIG["vocab_size"], (3, 11), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    token_type_ids = torch.zeros_like(input_ids)
    for row, length in enumerate((11, 7, 3)):
        attention_mask[row, length:] = 0
        input_ids[row, length:] = 0
        token_type_ids[row, length // 2 : length] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


@pytest.fixture
def save_hf_bert(tmp_path: Path) -> Callable[..., tuple[torch.nn.Module, Path]]:
    """Factory: a random transformers BERT (the test oracle) saved with save_pretrained; returns (model, folder).

    Noise is added to every parameter so biases and LayerNorm weights are not the trivial zeros/ones of a fresh init.
    """

    def save(architecture: str, subfolder: str = "hf", **config_overrides: Any) -> tuple[torch.nn.Module, Path]:
        import transformers

        torch.manual_seed(0)
        config = transformers.BertConfig(**{**TINY_BERT_CONFIG, **config_overrides})
        model = getattr(transformers, architecture)(config).eval()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.1)
        folder = tmp_path / subfolder
        model.save_pretrained(folder)
        return model, folder

    return save


def max_abs_difference(expected: torch.Tensor, actual: torch.Tensor) -> float:
    assert expected.shape == actual.shape
    return (expected - actual).abs().max().item()
