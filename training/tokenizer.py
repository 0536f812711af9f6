"""BERT WordPiece tokenizers with the `tokenizers` library alone, laid out the way transformers reads them.

A folder with tokenizer.json is taken as is; a folder with only vocab.txt (+ tokenizer_config.json) gets the same
pipeline transformers' BertTokenizerFast converter builds, so both tokenize identically.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from contract.files import read_json, token_text, tokenizer_settings
from contract.onnx_io import token_id

logger = logging.getLogger(__name__)

# Role -> default token, in the order the ids get assigned when training a vocabulary (pad first: pad_token_id 0).
SPECIAL_TOKEN_DEFAULTS: dict[str, str] = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}


def _read_vocab(path: Path) -> dict[str, int]:
    """vocab.txt: one token per line, id = line number (like transformers' load_vocab, later duplicates win)."""
    vocab: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            vocab[line.rstrip("\n")] = index
    return vocab


def _bert_pipeline(
    tokenizer: Tokenizer,
    special_tokens: dict[str, str],
    lowercase: bool,
    strip_accents: bool | None,
    handle_chinese_chars: bool,
) -> Tokenizer:
    """Normalizer, pre-tokenizer, [CLS] $A [SEP] $B:1 [SEP]:1 template and decoder of transformers' BERT converter."""
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=handle_chinese_chars, strip_accents=strip_accents, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    # Special tokens are matched on the raw text (normalized=False), so "[MASK]" stays one token in lower-cased text.
    tokenizer.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in special_tokens.values()]
    )
    cls, sep = special_tokens["cls_token"], special_tokens["sep_token"]
    cls_id, sep_id = tokenizer.token_to_id(cls), tokenizer.token_to_id(sep)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, cls_id), (sep, sep_id)],
    )
    return tokenizer


def _follow_config_normalizer(tokenizer: Tokenizer, config: dict[str, Any], folder: Path) -> None:
    """transformers' BertTokenizerFast rebuilds the normalizer when tokenizer_config.json disagrees with it; so do we.

    Its defaults apply to absent keys (do_lower_case True), so a config that omits do_lower_case lower-cases too.
    """
    normalizer = tokenizer.normalizer
    if not isinstance(normalizer, normalizers.BertNormalizer):
        return
    wanted = {
        "lowercase": bool(config.get("do_lower_case", True)),
        "strip_accents": config.get("strip_accents"),
        "handle_chinese_chars": bool(config.get("tokenize_chinese_chars", True)),
    }
    current = {name: getattr(normalizer, name) for name in wanted}
    if wanted != current:
        logger.info(
            "%s: tokenizer_config.json overrides the tokenizer.json normalizer: %s -> %s", folder, current, wanted
        )
        tokenizer.normalizer = normalizers.BertNormalizer(clean_text=normalizer.clean_text, **wanted)


def load_tokenizer(folder: str | Path) -> Tokenizer:
    """tokenizer.json when present, else vocab.txt + tokenizer_config.json; padding and truncation always off.

    Either way the result tokenizes like transformers' AutoTokenizer.from_pretrained(folder) (a BertTokenizerFast).
    """
    folder = Path(folder)
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file():
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        config_file = folder / "tokenizer_config.json"
        if config_file.is_file():
            _follow_config_normalizer(tokenizer, read_json(config_file), folder)
    else:
        vocab_file = folder / "vocab.txt"
        if not vocab_file.is_file():
            raise FileNotFoundError(f"{folder}: neither tokenizer.json nor vocab.txt found")
        config = tokenizer_settings(folder)
        special_tokens = {
            role: token_text(config.get(role), default) for role, default in SPECIAL_TOKEN_DEFAULTS.items()
        }
        tokenizer = Tokenizer(
            models.WordPiece(
                _read_vocab(vocab_file),
                unk_token=special_tokens["unk_token"],
                continuing_subword_prefix="##",
                max_input_chars_per_word=100,
            )
        )
        _bert_pipeline(
            tokenizer,
            special_tokens,
            lowercase=bool(config.get("do_lower_case", True)),
            strip_accents=config.get("strip_accents"),
            handle_chinese_chars=bool(config.get("tokenize_chinese_chars", True)),
        )
    # Checkpoints such as all-MiniLM-L6-v2 bake fixed padding/truncation into tokenizer.json; callers decide those.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def pad_token_id_of(tokenizer: Tokenizer, folder: str | Path | None = None) -> int:
    """The id batches are padded with: the tokenizer's pad token, ValueError when its vocabulary lacks it.

    The pad token is the one ``folder``'s tokenizer_config.json / special_tokens_map.json name, else [PAD].
    """
    settings = tokenizer_settings(folder) if folder is not None else {}
    return token_id(tokenizer, token_text(settings.get("pad_token"), SPECIAL_TOKEN_DEFAULTS["pad_token"]))


def mask_token_of(tokenizer: Tokenizer, folder: str | Path | None = None) -> str:
    """The mask token ``folder``'s tokenizer settings name (``<mask>`` for RoBERTa-style vocabularies), else [MASK]."""
    settings = tokenizer_settings(folder) if folder is not None else {}
    token = token_text(settings.get("mask_token"), SPECIAL_TOKEN_DEFAULTS["mask_token"])
    return token if tokenizer.token_to_id(token) is not None else SPECIAL_TOKEN_DEFAULTS["mask_token"]


def _normalizer_settings(tokenizer: Tokenizer, do_lower_case: bool) -> dict[str, Any]:
    """The BertNormalizer's own settings: transformers rebuilds the normalizer when the config disagrees with it."""
    normalizer = tokenizer.normalizer
    settings: dict[str, Any] = {"do_lower_case": do_lower_case, "strip_accents": None, "tokenize_chinese_chars": True}
    if isinstance(normalizer, normalizers.BertNormalizer):
        settings = {
            "do_lower_case": normalizer.lowercase,
            "strip_accents": normalizer.strip_accents,
            "tokenize_chinese_chars": normalizer.handle_chinese_chars,
        }
        if normalizer.lowercase != do_lower_case:
            logger.warning(
                "save_tokenizer: do_lower_case=%s disagrees with the tokenizer's normalizer (lowercase=%s); "
                "writing the normalizer's setting",
                do_lower_case,
                normalizer.lowercase,
            )
    return settings


def _special_tokens_of(tokenizer: Tokenizer) -> dict[str, str]:
    present = {token.content for token in tokenizer.get_added_tokens_decoder().values() if token.special}
    return {role: token for role, token in SPECIAL_TOKEN_DEFAULTS.items() if token in present}


def save_tokenizer(
    tokenizer: Tokenizer, folder: str | Path, do_lower_case: bool = True, model_max_length: int = 512
) -> None:
    """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json (AutoTokenizer-loadable)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    with (folder / "vocab.txt").open("w", encoding="utf-8") as handle:
        handle.writelines(f"{token}\n" for token, _ in sorted(vocab.items(), key=lambda item: item[1]))
    special_tokens = _special_tokens_of(tokenizer)
    config = {
        "tokenizer_class": "BertTokenizer",
        **_normalizer_settings(tokenizer, do_lower_case),
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": True,
        **special_tokens,
    }
    _write_json(folder / "tokenizer_config.json", config)
    _write_json(folder / "special_tokens_map.json", special_tokens)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, ensure_ascii=False)
        handle.write("\n")


def train_wordpiece(files: Iterable[str | Path], vocab_size: int, lowercase: bool = True) -> Tokenizer:
    """A BERT WordPiece vocabulary trained on text files; ids 0-4 are [PAD] [UNK] [CLS] [SEP] [MASK]."""
    special_tokens = dict(SPECIAL_TOKEN_DEFAULTS)
    tokenizer = Tokenizer(models.WordPiece(unk_token=special_tokens["unk_token"], max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=[AddedToken(token, special=True, normalized=False) for token in special_tokens.values()],
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train([str(path) for path in files], trainer)
    return _bert_pipeline(tokenizer, special_tokens, lowercase=lowercase, strip_accents=None, handle_chinese_chars=True)
