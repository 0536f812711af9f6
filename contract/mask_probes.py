"""Whole-word mask probes: the fill-mask evaluation set that training and the served bundle both score.

A probe is a text line with every ``every``-th whitespace-delimited word (positions ``every - 1``,
``2 * every - 1``, ...) replaced by the mask token, when that word is alphabetic, at least two
characters long and one vocabulary token on its own; the answers are those tokens' ids. No random
draw is involved, so ``python -m training finetune --task fill-mask --eval FILE`` and a client posting
the same probes to ``/v1/fill-mask`` (``benchmarks.served_scores.fill_mask_scores``) score the very
same masks: top-1 is "the best candidate is the answer id", top-5 "it is among the first five".

Torch-free (``tokenizers`` only): ``training`` and ``benchmarks`` import it alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

DEFAULT_EVERY = 7
MIN_WORD_CHARS = 2


@dataclass(frozen=True)
class MaskProbe:
    text: str  # the line's words joined by single spaces, some of them replaced by the mask token
    answers: tuple[int, ...]  # the masked words' token ids, in text order (one per mask token in `text`)
    words: tuple[str, ...]  # the masked words, in text order


def plain_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """``tokenizer`` itself when it neither truncates nor pads, else a copy with both turned off.

    The copy (about 80 ms for a BERT vocabulary) leaves the caller's tokenizer, possibly shared between
    threads, untouched.
    """
    if tokenizer.truncation is None and tokenizer.padding is None:
        return tokenizer
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _unknown_token_id(tokenizer: Tokenizer) -> int | None:
    unknown = getattr(tokenizer.model, "unk_token", None)
    return tokenizer.token_to_id(unknown) if isinstance(unknown, str) else None


def mask_probes(
    lines: Sequence[str],
    tokenizer: Tokenizer,
    mask_token: str = "[MASK]",
    every: int = DEFAULT_EVERY,
    max_length: int = 128,
    limit: int | None = None,
) -> list[MaskProbe]:
    """Probes from ``lines``, in line order; deterministic.

    Word ``i`` of a line (``line.split()``) is masked when ``i % every == every - 1``, ``word.isalpha()``,
    ``len(word) >= 2`` and the word, after a space as in the line (alone when it is the first), encodes
    (without special tokens) to exactly one id, not the unknown token's. The whole word is replaced by
    ``mask_token``. Skipped: lines with no such word, lines that already contain ``mask_token``, and lines whose
    probe text encodes (with special tokens) to more than ``max_length`` ids: the service refuses those rather than
    truncating them. ``limit`` caps the number of probes returned.

    The tokenizer should neither truncate nor pad (``no_truncation()`` / ``no_padding()``); one that does is
    copied with both turned off, the caller's is not changed. Raises ``ValueError`` when the tokenizer has no
    ``mask_token`` or a probe text does not encode to exactly one mask id per answer.
    """
    if every < 1:
        raise ValueError(f"every must be at least 1, got {every}")
    mask_id = tokenizer.token_to_id(mask_token)
    if mask_id is None:
        raise ValueError(f"the tokenizer has no mask token {mask_token!r}")
    tokenizer = plain_tokenizer(tokenizer)
    unknown_id = _unknown_token_id(tokenizer)
    single_ids: dict[str, int | None] = {}

    def single_id(spelled: str) -> int | None:
        if spelled not in single_ids:
            ids = tokenizer.encode(spelled, add_special_tokens=False).ids
            single_ids[spelled] = ids[0] if len(ids) == 1 and ids[0] != unknown_id else None
        return single_ids[spelled]

    drafts: list[MaskProbe] = []
    for line in lines:
        if mask_token in line:
            continue
        words = line.split()
        answers: list[int] = []
        masked: list[str] = []
        for index in range(every - 1, len(words), every):
            word = words[index]
            if not (word.isalpha() and len(word) >= MIN_WORD_CHARS):
                continue
            # spelled as in the line, after its space: byte-level BPE (RoBERTa, ModernBERT) has a token of its own
            # for " word", the one a mask there stands for; WordPiece and SentencePiece spell both alike
            token_id = single_id(f" {word}" if index else word)
            if token_id is None:
                continue
            answers.append(token_id)
            masked.append(word)
            words[index] = mask_token
        if answers:
            drafts.append(MaskProbe(" ".join(words), tuple(answers), tuple(masked)))

    probes: list[MaskProbe] = []
    for draft, encoding in zip(drafts, tokenizer.encode_batch([d.text for d in drafts]), strict=True):
        if len(encoding.ids) > max_length:
            continue
        found = sum(1 for token_id in encoding.ids if token_id == mask_id)
        if found != len(draft.answers):
            raise ValueError(
                f"probe {draft.text[:80]!r} encodes to {found} mask ids for {len(draft.answers)} masked words"
            )
        probes.append(draft)
        if limit is not None and len(probes) >= limit:
            break
    return probes
