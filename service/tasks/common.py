"""Helpers the task handlers share: score functions, input checks, truncating tokenizer copies."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from tokenizers import Encoding, Tokenizer

from service.tasks.base import InputError, Sequence

_TRUNCATING_CACHE_SIZE = 32
_truncating_lock = threading.Lock()
_truncating_cache: OrderedDict[tuple[int, int, int, str], tuple[Tokenizer, Tokenizer]] = OrderedDict()


def softmax(values: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, written as the pipelines write it (keeps float32 as float32)."""
    shifted = np.exp(values - np.max(values, axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(values: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-values))


def require_text(text: object, what: str = "text") -> str:
    if not isinstance(text, str):
        raise InputError(f"{what} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError(f"{what} is empty")
    return text


def require_top_k(top_k: int, what: str = "top_k") -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(f"{what} must be an integer >= 1, got {top_k!r}")
    return top_k


def truncating_tokenizer(
    base: Tokenizer, max_length: int, stride: int = 0, strategy: str = "longest_first"
) -> Tokenizer:
    """A copy of ``base`` with truncation (and overflowing windows) configured, cached per setting.

    The engine shares one unconfigured tokenizer between threads; configuring truncation on it would
    race between requests with different settings, so each setting gets its own never-mutated copy.
    """
    key = (id(base), max_length, stride, strategy)
    with _truncating_lock:
        hit = _truncating_cache.get(key)
        if hit is not None and hit[0] is base:
            _truncating_cache.move_to_end(key)
            return hit[1]
    configured = Tokenizer.from_str(base.to_str())
    configured.no_padding()
    configured.enable_truncation(max_length, stride=stride, strategy=strategy, direction="right")
    with _truncating_lock:
        _truncating_cache[key] = (base, configured)
        _truncating_cache.move_to_end(key)
        while len(_truncating_cache) > _TRUNCATING_CACHE_SIZE:
            _truncating_cache.popitem(last=False)
    return configured


def encode_batch(tokenizer: Tokenizer, inputs: list, what: str = "input") -> list[Encoding]:
    """``tokenizer.encode_batch``; a tokenizer refusal (e.g. a question too long to window) is a client error."""
    try:
        return tokenizer.encode_batch(inputs, add_special_tokens=True)
    except Exception as exc:  # tokenizers raises a bare Exception for truncation errors
        raise InputError(f"cannot tokenize the {what}: {exc}") from exc


def with_windows(encoding: Encoding) -> list[Encoding]:
    """The encoding followed by its overflowing windows, in the order transformers flattens them."""
    return [encoding, *encoding.overflowing]


def to_sequence(encoding: Encoding) -> Sequence:
    return Sequence(
        input_ids=np.asarray(encoding.ids, dtype=np.int64),
        token_type_ids=np.asarray(encoding.type_ids, dtype=np.int64),
    )
