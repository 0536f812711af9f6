"""The token cap counts what the tokenizer would give, and stops counting soon after the cap."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from service.errors import PayloadTooLarge
from service.prepare_stage import CHUNK_CHARS, check_token_cap, count_tokens_up_to, text_chunks
from tests.service.tiny_models import TinyModel

TEXT = "John Smith lives in Paris, and works for the United Nations in Geneva. " * 2000


@pytest.fixture(scope="module")
def tokenizer(text_classification_model: TinyModel) -> Tokenizer:
    loaded = Tokenizer.from_file(str(Path(text_classification_model.bundle) / "tokenizer.json"))
    loaded.no_padding()
    loaded.no_truncation()
    return loaded


def test_chunks_cut_at_spaces_and_cover_the_text() -> None:
    chunks = text_chunks(TEXT)
    assert len(chunks) > 3 and "".join(chunks) == TEXT
    assert all(len(chunk) <= CHUNK_CHARS for chunk in chunks)
    assert all(chunk.startswith(" ") for chunk in chunks[1:])


def test_chunked_count_equals_the_whole_texts_count(tokenizer: Tokenizer) -> None:
    whole = len(tokenizer.encode(TEXT, add_special_tokens=False).ids)
    assert count_tokens_up_to(tokenizer, [TEXT], whole) == (whole, len(TEXT))


def test_over_the_cap_is_413_after_counting_only_about_the_cap(tokenizer: Tokenizer) -> None:
    huge = TEXT * 8  # ~1.1 MB
    tokens, chars = count_tokens_up_to(tokenizer, [huge], 1000)
    assert tokens > 1000 and chars <= CHUNK_CHARS  # one chunk was enough to know
    started = time.perf_counter()
    with pytest.raises(PayloadTooLarge, match=r"about \d+ tokens .*at most 1000 tokens \(max_request_tokens\)"):
        check_token_cap(tokenizer, ["short", huge], 1000, "max_request_tokens")
    assert time.perf_counter() - started < 0.5
    check_token_cap(tokenizer, ["a" * 250], 1000, "max_request_tokens")  # 4 x 250 chars: not even counted
    exact = len(tokenizer.encode(TEXT[:5000], add_special_tokens=False).ids)
    check_token_cap(tokenizer, [TEXT[:5000]], exact, "max_request_tokens")  # counted: exactly at the cap is fine
    with pytest.raises(PayloadTooLarge):
        check_token_cap(tokenizer, [TEXT[:5000]], exact - 1, "max_request_tokens")
