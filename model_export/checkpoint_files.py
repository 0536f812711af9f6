"""What a checkpoint folder says beyond its weights: tokenizer, special tokens, max length, weights hash."""

from __future__ import annotations

import hashlib
import logging
from functools import partial
from pathlib import Path

from tokenizers import Tokenizer, normalizers

from model_export.bundle import SpecialTokens
from model_export.files import read_json, token_text, tokenizer_settings
from model_export.validate import ExportError
from training.model import BertConfig
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
        do_lower_case = bool(settings.get("do_lower_case", True))
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


def resolve_max_length(requested: int | None, tokenizer_settings: dict, config: BertConfig) -> int:
    limit = config.max_position_embeddings
    if requested is not None:
        if not 2 <= requested <= limit:
            raise ExportError(f"--max-length {requested} is outside 2..{limit} (max_position_embeddings)")
        return requested
    from_tokenizer = tokenizer_settings.get("model_max_length")
    if isinstance(from_tokenizer, int) and 2 <= from_tokenizer <= limit:
        return from_tokenizer
    return min(limit, 512)


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
