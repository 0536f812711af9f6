"""Tiny random sentence-transformers models, saved the way sentence-transformers saves them (modules.json,
the Pooling module's config.json, optionally Normalize): the test oracle for feature-extraction bundles.

transformers writes the encoder (a random BertModel) and a fast tokenizer over the service tests' word list;
sentence-transformers wraps them with Pooling (+ Normalize) and ``save()`` writes the folder the exporter reads.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HIDDEN = 32
MAX_LENGTH = 128


def sentence_transformer_modules() -> tuple[type, type, type]:
    """(Transformer, Pooling, Normalize) from sentence-transformers >= 5, or its older ``models`` module."""
    try:
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    except ImportError:
        from sentence_transformers.models import Normalize, Pooling, Transformer  # type: ignore[no-redef]
    return Transformer, Pooling, Normalize


def make_encoder(folder: Path, seed: int = 0) -> Path:
    """A random transformers BertModel (32 wide, 2 layers) with a fast uncased tokenizer."""
    import torch
    import transformers

    from tests.service.tiny_models import build_vocab

    folder.mkdir(parents=True, exist_ok=True)
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab()) + "\n")
    tokenizer = transformers.BertTokenizerFast(
        vocab_file=str(vocab_file), do_lower_case=True, model_max_length=MAX_LENGTH
    )
    tokenizer.save_pretrained(folder)
    config = transformers.BertConfig(
        vocab_size=len(build_vocab()),
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH,
        architectures=["BertModel"],
    )
    torch.manual_seed(seed)
    transformers.BertModel(config).eval().save_pretrained(folder, safe_serialization=True)
    return folder


def make_sentence_transformer(folder: Path, pooling: str = "mean", normalize: bool = True, seed: int = 0) -> Path:
    """A tiny sentence-transformers model saved into ``folder`` (modules.json, config.json, weights, tokenizer)."""
    from sentence_transformers import SentenceTransformer

    transformer, pooling_module, normalize_module = sentence_transformer_modules()
    encoder = make_encoder(folder.parent / f"{folder.name}-encoder", seed)
    modules = [transformer(str(encoder)), pooling_module(HIDDEN, pooling_mode=pooling)]
    if normalize:
        modules.append(normalize_module())
    SentenceTransformer(modules=modules, device="cpu").save(str(folder))
    assert (folder / "modules.json").is_file()
    return folder


def load_sentence_transformer(folder: Path):  # type: ignore[no-untyped-def]
    """The saved model as sentence-transformers loads it (offline, CPU)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", local_files_only=True)
