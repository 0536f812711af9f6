"""What a checkpoint folder says beyond its weights: tokenizer, special tokens, max length, weights hash."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, normalizers

from contract.bundle import POOLINGS, SpecialTokens
from contract.files import read_json, token_text, tokenizer_settings
from model_export.validate import ExportError
from training.tokenizer import load_tokenizer

logger = logging.getLogger(__name__)


def prepare_tokenizer(folder: Path, task: str, vocab_size: int) -> tuple[Tokenizer, SpecialTokens, bool, dict]:
    """The checkpoint's fast tokenizer (padding/truncation off), its special tokens and do_lower_case."""
    try:
        tokenizer = load_tokenizer(folder)
    except FileNotFoundError as error:
        raise ExportError(str(error)) from error
    except Exception as error:  # tokenizers raises bare Exception for malformed tokenizer.json
        raise ExportError(f"{folder}: cannot load the tokenizer ({error})") from error
    settings = tokenizer_settings(folder, error=ExportError)
    normalizer = tokenizer.normalizer
    if isinstance(normalizer, normalizers.BertNormalizer):
        # transformers rebuilds the normalizer when tokenizer_config.json disagrees with tokenizer.json; so do we.
        wanted = {
            "lowercase": settings.get("do_lower_case", normalizer.lowercase),
            "strip_accents": settings.get("strip_accents", normalizer.strip_accents),
            "handle_chinese_chars": settings.get("tokenize_chinese_chars", normalizer.handle_chinese_chars),
        }
        if any(getattr(normalizer, key) != value for key, value in wanted.items()):
            logger.info("tokenizer_config.json overrides the tokenizer.json normalizer: %s", wanted)
            tokenizer.normalizer = normalizers.BertNormalizer(clean_text=normalizer.clean_text, **wanted)
        do_lower_case = bool(wanted["lowercase"])
    else:
        do_lower_case = bool(settings.get("do_lower_case", False))
    defaults = SpecialTokens()
    special = SpecialTokens(
        **{role: token_text(settings.get(role), getattr(defaults, role)) for role in defaults.__dataclass_fields__}
    )
    required = ["cls_token", "sep_token", "pad_token", "unk_token"] + (["mask_token"] if task == "fill-mask" else [])
    for role in required:
        if tokenizer.token_to_id(getattr(special, role)) is None:
            raise ExportError(f"{folder}: the tokenizer has no {role} {getattr(special, role)!r}")
    if tokenizer.get_vocab_size(with_added_tokens=True) > vocab_size:
        raise ExportError(
            f"{folder}: the tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, "
            f"the model's vocab_size is {vocab_size}"
        )
    return tokenizer, special, do_lower_case, settings


def resolve_max_length(requested: int | None, tokenizer_settings: dict, limit: int) -> int:
    """The bundle's max_length: as asked, else the tokenizer's model_max_length, else ``limit`` (the checkpoint's
    position embeddings, at most 512)."""
    if requested is not None:
        if not 2 <= requested <= limit:
            raise ExportError(f"--max-length {requested} is outside 2..{limit} (the position embeddings)")
        return requested
    from_tokenizer = tokenizer_settings.get("model_max_length")
    if isinstance(from_tokenizer, int) and 2 <= from_tokenizer <= limit:
        return from_tokenizer
    return limit


def weights_sha256(folder: Path) -> str:
    """Hash of the weight files load_model reads (model.safetensors, its shards, or pytorch_model.bin)."""
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    elif index.is_file():
        weight_map = read_json(index, error=ExportError).get("weight_map", {})
        files = [folder / name for name in sorted(set(weight_map.values()))]
    else:
        files = [folder / "pytorch_model.bin"]
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as handle:
            for chunk in iter(partial(handle.read, 1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


# modules.json module classes (the last part of "type") whose computation the graph reproduces.
_ST_SUPPORTED_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})
# 1_Pooling/config.json as sentence-transformers < 5 writes it: one flag per mode (none set means mean).
_ST_LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class SentencePooling:
    """How token states become one sentence embedding, and where that choice came from."""

    pooling: str  # one of bundle.POOLINGS
    normalize: bool
    max_seq_length: int | None  # sentence_bert_config.json's truncation length (None: not stated)
    source: str  # for the progress line: "modules.json" or "default"


def sentence_pooling(folder: Path, pooling: str = "auto", normalize: bool | None = None) -> SentencePooling:
    """The pooling a feature-extraction export bakes in: explicit choices win, then the checkpoint's
    sentence-transformers files (modules.json, its Pooling module's config.json, sentence_bert_config.json), then
    mean pooling with L2 normalisation (what all-MiniLM-L6-v2 and most sentence-transformers models do).

    ExportError when modules.json lists a module the graph cannot reproduce (Dense, max pooling, ...).
    """
    if pooling not in ("auto", *POOLINGS):
        raise ExportError(f"unknown pooling {pooling!r} (known: auto, {', '.join(POOLINGS)})")
    modules_path = folder / "modules.json"
    found_pooling, found_normalize, source = "mean", True, "default"
    if modules_path.is_file():
        modules = _read_modules(modules_path)
        names = [str(module.get("type", "")).rsplit(".", 1)[-1] for module in modules]
        unsupported = [name for name in names if name not in _ST_SUPPORTED_MODULES]
        if unsupported:
            raise ExportError(
                f"{modules_path}: module(s) {', '.join(unsupported)} cannot be exported "
                f"(supported: {', '.join(sorted(_ST_SUPPORTED_MODULES))})"
            )
        found_normalize, source = "Normalize" in names, "modules.json"
        pooling_module = next((m for m, name in zip(modules, names, strict=True) if name == "Pooling"), None)
        if pooling_module is not None:
            found_pooling = _pooling_from_config(folder / str(pooling_module.get("path", "")) / "config.json")
    settings = read_json(folder / "sentence_bert_config.json", optional=True, error=ExportError)
    max_seq_length = settings.get("max_seq_length")
    return SentencePooling(
        pooling=found_pooling if pooling == "auto" else pooling,
        normalize=found_normalize if normalize is None else normalize,
        max_seq_length=max_seq_length if isinstance(max_seq_length, int) and max_seq_length >= 2 else None,
        source=source,
    )


def sentence_prompts(folder: Path) -> tuple[dict[str, str], str | None]:
    """config_sentence_transformers.json's named prompts and default_prompt_name ({} and None when absent)."""
    settings = read_json(folder / "config_sentence_transformers.json", optional=True, error=ExportError)
    prompts = settings.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise ExportError(f"{folder}: config_sentence_transformers.json's prompts must map names to texts")
    default = settings.get("default_prompt_name")
    return {str(k): v for k, v in prompts.items()}, default if default in prompts else None


def _read_modules(path: Path) -> list[dict[str, Any]]:
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ExportError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(modules, list) or not all(isinstance(module, dict) for module in modules):
        raise ExportError(f"{path}: expected a JSON list of modules")
    return sorted(modules, key=lambda module: int(module.get("idx", 0)))


def _pooling_from_config(path: Path) -> str:
    """The Pooling module's config.json -> mean or cls; ExportError for modes (or mixes) the graph does not compute.

    sentence-transformers >= 5 writes ``"pooling_mode": "mean"`` (or a list); older versions one flag per mode.
    """
    config = read_json(path, "sentence-transformers pooling config", error=ExportError)
    mode = config.get("pooling_mode")
    if mode is not None:
        modes = [mode] if isinstance(mode, str) else list(mode)
    else:
        modes = [name for flag, name in _ST_LEGACY_POOLING_FLAGS.items() if config.get(flag)] or ["mean"]
    if len(modes) != 1 or modes[0] not in POOLINGS:
        raise ExportError(
            f"{path}: pooling {' + '.join(map(str, modes))} cannot be exported (supported: {', '.join(POOLINGS)})"
        )
    return str(modes[0])
