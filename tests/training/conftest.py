"""Shared fixtures for training tests: tiny tokenizers and data files built locally (no downloads)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

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
