"""Whole-word mask probes on the real all-MiniLM-L6-v2 tokenizer: which words are masked, and how probes encode."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from contract.mask_probes import MaskProbe, mask_probes
from tests.minilm import minilm_folder, minilm_tokenizer

# 18 words: with every=7 the words at positions 6 ("mill") and 13 ("the") are masked.
RIVER = "the old river runs past the mill and then it turns north toward the city where people fish"
# With every=2 the odd positions are candidates: multi-piece words (unbelievably, Schwarzenegger, lobsters),
# punctuation (U.S., don't, north,, <unk>), digits (1999) and a one-letter word (a) are not masked; only "house" is.
NEVER = "x unbelievably x U.S. x 1999 x a x <unk> x don't x lobsters x Schwarzenegger x north, x house"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return minilm_tokenizer()


def single_id(tokenizer: Tokenizer, word: str) -> int:
    ids = tokenizer.encode(word, add_special_tokens=False).ids
    assert len(ids) == 1, word
    return ids[0]


def test_every_seventh_word_is_masked(tokenizer: Tokenizer) -> None:
    (probe,) = mask_probes([RIVER], tokenizer)
    words = RIVER.split()
    expected = [*words[:6], "[MASK]", *words[7:13], "[MASK]", *words[14:]]
    assert probe == MaskProbe(
        " ".join(expected), (single_id(tokenizer, "mill"), single_id(tokenizer, "the")), ("mill", "the")
    )
    (every_third,) = mask_probes([RIVER], tokenizer, every=3)
    assert every_third.words == tuple(words[2::3]) == ("river", "the", "then", "north", "city", "fish")
    assert every_third.answers == tuple(single_id(tokenizer, word) for word in every_third.words)


def test_multi_piece_and_non_alphabetic_words_are_never_masked(tokenizer: Tokenizer) -> None:
    (probe,) = mask_probes([NEVER], tokenizer, every=2)
    assert probe.words == ("house",)
    assert probe.text == NEVER.replace(" house", " [MASK]")
    # every=1 makes every word a candidate: masked words pass the rule, kept words fail it.
    lines = [NEVER, RIVER, "Homarus gammarus , known as the European lobster , is a species of <unk> lobster ."]
    for line, probe in zip(lines, mask_probes(lines, tokenizer, every=1), strict=True):
        masked = iter(probe.words)
        for original, shown in zip(line.split(), probe.text.split(), strict=True):
            one_token = len(tokenizer.encode(original, add_special_tokens=False).ids) == 1
            eligible = original.isalpha() and len(original) >= 2 and one_token
            assert (shown == "[MASK]") == eligible, original
            if shown == "[MASK]":
                assert next(masked) == original
        assert next(masked, None) is None


def test_a_probe_encodes_one_mask_id_per_answer_at_the_masked_words(tokenizer: Tokenizer) -> None:
    mask_id = tokenizer.token_to_id("[MASK]")
    lines = [
        RIVER,
        "the quick brown fox jumps over the lazy dog near the river bank",
        f"{RIVER} {RIVER}",
        "  spaces   and\ttabs are  one separator here: city north river  ",
    ]
    probes = mask_probes(lines, tokenizer, every=3)
    assert len(probes) == len(lines)
    for line, probe in zip(lines, probes, strict=True):
        encoding = tokenizer.encode(probe.text)
        pairs = zip(encoding.ids, encoding.offsets, strict=True)
        mask_spans = [offsets for token_id, offsets in pairs if token_id == mask_id]
        assert len(mask_spans) == len(probe.answers) == len(probe.words) > 0
        starts, offset = [], 0
        for word in probe.text.split(" "):
            starts.append(offset)
            offset += len(word) + 1
        masked_at = [i for i, word in enumerate(probe.text.split(" ")) if word == "[MASK]"]
        assert mask_spans == [(starts[i], starts[i] + len("[MASK]")) for i in masked_at]
        # Putting the words back gives the line with its whitespace collapsed.
        words = iter(probe.words)
        restored = [next(words) if word == "[MASK]" else word for word in probe.text.split(" ")]
        assert restored == line.split()


def test_overlong_lines_are_skipped(tokenizer: Tokenizer) -> None:
    long_line = " ".join(["river"] * 200)  # 200 one-token words: 202 ids with [CLS] and [SEP]
    assert len(mask_probes([long_line], tokenizer, max_length=202)) == 1
    assert mask_probes([long_line, RIVER], tokenizer, max_length=201) == mask_probes([RIVER], tokenizer)
    assert mask_probes([long_line, RIVER], tokenizer) == mask_probes([RIVER], tokenizer)  # max_length 128


def test_lines_without_a_candidate_or_with_a_mask_already_are_skipped(tokenizer: Tokenizer) -> None:
    lines = ["too short to reach word seven", f"[MASK] {RIVER}", "one two three four five six 1999 eight", RIVER]
    assert mask_probes(lines, tokenizer) == mask_probes([RIVER], tokenizer)
    assert mask_probes([RIVER, NEVER, RIVER], tokenizer, every=2, limit=2) == mask_probes(
        [RIVER, NEVER], tokenizer, every=2
    )


def test_deterministic_and_the_callers_tokenizer_is_left_as_it_was(tokenizer: Tokenizer) -> None:
    lines = [RIVER, NEVER, " ".join(["river"] * 150), f"{RIVER} {NEVER}"]
    first = mask_probes(lines, tokenizer, every=2, max_length=256)
    assert first == mask_probes(lines, tokenizer, every=2, max_length=256)
    padded = Tokenizer.from_file(str(minilm_folder() / "tokenizer.json"))  # the file pads and truncates to 128
    assert mask_probes(lines, padded, every=2, max_length=256) == first  # run on a copy without either
    assert padded.truncation is not None and padded.padding is not None
    assert len(padded.encode("river").ids) == 128


def test_bad_arguments(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="no mask token"):
        mask_probes([RIVER], tokenizer, mask_token="<mask>")
    with pytest.raises(ValueError, match="every"):
        mask_probes([RIVER], tokenizer, every=0)
