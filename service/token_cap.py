"""The per-request token cap: a request's text is tokenized only as far as the cap, so a huge one is
refused (413) after tokenizing about ``limit`` tokens of it, not all of it.

The text is tokenized in chunks cut at spaces: for tokenizers that split words at whitespace (BERT's
WordPiece) the chunks' counts add up to the whole text's count. No tokenizer makes more than one token
per UTF-8 byte, so a text of at most ``limit / 4`` characters is not counted at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

from service.errors import PayloadTooLarge

CHUNK_CHARS = 16384
MAX_TOKENS_PER_CHAR = 4


def text_chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` in pieces of at most ``size`` characters, cut at a space where one is in the piece's second half."""
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = start + size
        if end < len(text):
            cut = text.rfind(" ", start + size // 2, end)
            end = cut if cut > start else end
        chunks.append(text[start:end])
        start = end
    return chunks


def count_tokens_up_to(tokenizer: Tokenizer, texts: Sequence[str], limit: int) -> tuple[int, int]:
    """``(tokens, characters)`` counted over ``texts`` (no special tokens), stopping once tokens exceed ``limit``."""
    tokens = chars = 0
    for text in texts:
        for chunk in text_chunks(text):
            tokens += len(tokenizer.encode(chunk, add_special_tokens=False).ids)
            chars += len(chunk)
            if tokens > limit:
                return tokens, chars
    return tokens, chars


def check_token_cap(tokenizer: Tokenizer, texts: Sequence[str], limit: int, setting: str) -> None:
    """PayloadTooLarge when ``texts`` hold more than ``limit`` tokens (``setting`` names the limit)."""
    total_chars = sum(len(text) for text in texts)
    if total_chars * MAX_TOKENS_PER_CHAR <= limit:
        return
    tokens, chars = count_tokens_up_to(tokenizer, texts, limit)
    if tokens <= limit:
        return
    estimate = round(tokens * total_chars / max(chars, 1))
    raise PayloadTooLarge(
        f"the request's text is about {estimate} tokens ({total_chars} characters); one request may bring at most "
        f"{limit} tokens ({setting}): send shorter texts or split them over several requests"
    )
