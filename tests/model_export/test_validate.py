"""Parity checks on hand-made outputs: what counts as a difference, an agreement, a failure."""

from __future__ import annotations

import numpy as np
import pytest

from contract.bundle import INPUT_NAMES
from model_export.validate import (
    PROBE_TEXTS,
    TOP1_MARGIN,
    ParityError,
    SpecialIds,
    Tolerance,
    compare,
    default_tolerance,
    probe_batches,
    text_batches,
)

SPECIAL = SpecialIds(cls=2, sep=3, pad=0)


def token_logits(batches, labels: int = 5, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"logits": rng.normal(size=(*batch["input_ids"].shape, labels)).astype(np.float32)} for batch in batches]


def copy_outputs(outputs: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    return [{name: value.copy() for name, value in batch.items()} for batch in outputs]


def test_probe_batches_are_padded_bert_pairs_within_max_length() -> None:
    batches = probe_batches(vocab_size=50, special=SPECIAL, max_length=20)
    assert len(batches) >= 3
    for batch in batches:
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        assert ids.dtype == mask.dtype == types.dtype == np.int64
        assert ids.shape[1] <= 20 and ((ids >= 0) & (ids < 50)).all()
        lengths = mask.sum(axis=1)
        for row, length in enumerate(lengths):
            assert (mask[row, :length] == 1).all() and (mask[row, length:] == 0).all()
            assert ids[row, 0] == SPECIAL.cls and ids[row, length - 1] == SPECIAL.sep
            assert (ids[row, length:] == SPECIAL.pad).all() and (types[row, length:] == 0).all()
            assert (ids[row, 1 : length - 1] == SPECIAL.sep).sum() == 1
            assert not np.isin(ids[row, 1 : length - 1], [SPECIAL.cls, SPECIAL.pad]).any()
        if len(lengths) > 1:
            assert lengths.min() < ids.shape[1]
    assert any(batch["token_type_ids"].any() for batch in batches)
    again = probe_batches(vocab_size=50, special=SPECIAL, max_length=20)
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(batches, again, strict=True))


@pytest.mark.parametrize("type_vocab_size", [1, 2])
def test_text_batches_encode_the_probe_texts_with_padding(tmp_path, type_vocab_size: int) -> None:
    from tests.model_export.conftest import write_vocab
    from training.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(tmp_path).parent)
    pad = tokenizer.token_to_id("[PAD]")
    batches = text_batches(tokenizer, max_length=128, pad_id=pad, type_vocab_size=type_vocab_size)
    rows = [row for batch in batches for row in zip(*(batch[name] for name in INPUT_NAMES), strict=True)]
    assert len(rows) == len(PROBE_TEXTS)
    for (ids, mask, types), text in zip(rows, PROBE_TEXTS, strict=True):
        encoding = tokenizer.encode(*text) if isinstance(text, tuple) else tokenizer.encode(text)
        length = min(len(encoding.ids), 128)
        assert ids[:length].tolist() == encoding.ids[:length] and (ids[length:] == pad).all()
        assert mask.tolist() == [1] * length + [0] * (len(mask) - length)
        expected_types = encoding.type_ids[:length] if type_vocab_size > 1 else [0] * length
        assert types[:length].tolist() == expected_types and not types[length:].any()
    assert any(batch["attention_mask"].min() == 0 for batch in batches)
    if type_vocab_size > 1:
        assert any(batch["token_type_ids"].any() for batch in batches)
    truncated = text_batches(tokenizer, max_length=24, pad_id=pad, type_vocab_size=type_vocab_size)
    assert max(batch["input_ids"].shape[1] for batch in truncated) == 24


def test_identical_outputs_pass_with_zero_difference() -> None:
    batches = probe_batches(50, SPECIAL, 32)
    reference = token_logits(batches)
    report = compare("token-classification", batches, reference, copy_outputs(reference), default_tolerance())
    assert report["max_abs_diff"] == {"logits": 0.0}
    assert report["top1_agreement"] == {"logits": 1.0}


def test_difference_beyond_atol_at_a_real_token_fails() -> None:
    batches = probe_batches(50, SPECIAL, 32)
    reference = token_logits(batches)
    candidate = copy_outputs(reference)
    candidate[1]["logits"][0, 1, 0] += 1e-3
    with pytest.raises(ParityError, match=r"output logits differs from torch by 0\.001 > atol 0\.0001"):
        compare("token-classification", batches, reference, candidate, default_tolerance())
    report = compare("token-classification", batches, reference, candidate, Tolerance(atol=1e-2))
    assert report["max_abs_diff"]["logits"] == pytest.approx(1e-3, rel=1e-3)


def test_differences_at_padding_positions_are_ignored_for_token_outputs() -> None:
    batches = probe_batches(50, SPECIAL, 32)
    reference = token_logits(batches)
    candidate = copy_outputs(reference)
    padding = batches[1]["attention_mask"] == 0
    assert padding.any()
    candidate[1]["logits"][padding] += 100.0
    report = compare("token-classification", batches, reference, candidate, default_tolerance())
    assert report["max_abs_diff"]["logits"] == 0.0


def test_sequence_level_logits_are_compared_whole_even_when_labels_equal_length() -> None:
    batches = probe_batches(50, SPECIAL, 32, shapes=[(3, 5)])
    reference = [{"logits": np.zeros((3, 5), dtype=np.float32)}]
    candidate = [{"logits": np.zeros((3, 5), dtype=np.float32)}]
    candidate[0]["logits"][2, 4] = 1.0  # would be a padding position if mistaken for a token axis
    with pytest.raises(ParityError, match="logits differs"):
        compare("text-classification", batches, reference, candidate, default_tolerance())


@pytest.mark.parametrize("flips", [0, 3, 40])
def test_int8_agreement_counts_top1_flips_at_real_tokens(flips: int) -> None:
    batches = probe_batches(50, SPECIAL, 32)
    reference = token_logits(batches)
    candidate = copy_outputs(reference)
    real = [
        (index, position)
        for index, batch in enumerate(batches)
        for position in zip(*np.nonzero(batch["attention_mask"]), strict=True)
    ]
    for index, (row, column) in real[:flips]:
        logits = candidate[index]["logits"][row, column]
        logits[logits.argmin()] = logits.max() + 1.0
    # Only rows where the reference's top-1 leads by TOP1_MARGIN count: a flip of a near-tie is not an error.
    top_two = [-np.sort(-reference[index]["logits"][row, column])[:2] for index, (row, column) in real]
    decisive = [bool(first - second >= TOP1_MARGIN) for first, second in top_two]
    expected = 1 - sum(decisive[:flips]) / sum(decisive)
    tolerance = default_tolerance("fp32", "int8")
    if expected < tolerance.min_top1_agreement:
        with pytest.raises(ParityError, match="top-1 of logits agrees with torch"):
            compare("token-classification", batches, reference, candidate, tolerance)
    else:
        report = compare("token-classification", batches, reference, candidate, tolerance)
        assert report["top1_agreement"]["logits"] == pytest.approx(expected)
        assert report["top1_near_ties"]["logits"] == len(real) - sum(decisive)


def test_near_tie_flips_are_reported_not_counted() -> None:
    batches = probe_batches(50, SPECIAL, 32, shapes=[(1, 6)])
    reference = [{"logits": np.zeros((1, 6, 3), np.float32)}]
    reference[0]["logits"][0, :, 0] = TOP1_MARGIN / 2  # every row: class 0 leads by less than the margin
    candidate = copy_outputs(reference)
    candidate[0]["logits"][0, :, 1] = TOP1_MARGIN  # and every row flips to class 1
    report = compare("token-classification", batches, reference, candidate, default_tolerance("fp32", "int8"))
    assert report["top1_agreement"]["logits"] == 1.0
    assert report["top1_near_ties"]["logits"] == 6


def test_answer_positions_agree_over_the_sequence_axis_without_padding() -> None:
    batches = probe_batches(50, SPECIAL, 32, shapes=[(4, 12)])
    mask = batches[0]["attention_mask"]
    start = np.random.default_rng(1).normal(size=mask.shape).astype(np.float32)
    start[:, 1] += 10.0  # a decisive answer position in every row
    reference = [{"start_logits": start, "end_logits": start.copy()}]
    candidate = copy_outputs(reference)
    candidate[0]["start_logits"][mask == 0] = 50.0  # padding never wins an answer position
    candidate[0]["end_logits"][0] = -candidate[0]["end_logits"][0]  # row 0 picks another end
    report = compare("question-answering", batches, reference, candidate, Tolerance(atol=None))
    assert report["top1_agreement"] == {"start_logits": 1.0, "end_logits": 0.75}


def test_sentence_embeddings_are_judged_by_cosine() -> None:
    batches = probe_batches(50, SPECIAL, 32, shapes=[(3, 10)])
    rng = np.random.default_rng(2)
    embedding = rng.normal(size=(3, 8)).astype(np.float32)
    reference = [{"sentence_embedding": embedding}]
    scaled = [{"sentence_embedding": embedding * 1.5}]  # same directions: cosine 1, however far apart the values
    report = compare("feature-extraction", batches, reference, scaled, Tolerance(atol=None, min_cosine=0.99))
    assert report["min_cosine"]["sentence_embedding"] == pytest.approx(1.0)
    assert "top1_agreement" not in report
    nudged = embedding.copy()
    nudged[1, 0] += 0.5
    expected = embedding[1] @ nudged[1] / np.linalg.norm(embedding[1]) / np.linalg.norm(nudged[1])
    report = compare(
        "feature-extraction", batches, reference, [{"sentence_embedding": nudged}], Tolerance(atol=None, min_cosine=0.5)
    )
    assert report["min_cosine"]["sentence_embedding"] == pytest.approx(expected, rel=1e-5)
    flipped = embedding.copy()
    flipped[2] = -flipped[2]
    with pytest.raises(ParityError, match="sentence_embedding has cosine"):
        compare(
            "feature-extraction",
            batches,
            reference,
            [{"sentence_embedding": flipped}],
            Tolerance(atol=None, min_cosine=0.99),
        )
    with pytest.raises(ParityError, match="sentence_embedding differs from torch"):
        compare("feature-extraction", batches, reference, scaled, default_tolerance())


@pytest.mark.parametrize(
    ("candidate", "message"),
    [
        ({"scores": np.zeros((1, 5, 5), np.float32)}, "outputs"),
        ({"logits": np.zeros((1, 5, 4), np.float32)}, "has shape"),
        ({"logits": np.full((1, 5, 5), np.nan, np.float32)}, "non-finite"),
    ],
)
def test_names_shapes_and_nan_are_checked(candidate: dict[str, np.ndarray], message: str) -> None:
    batches = probe_batches(50, SPECIAL, 32, shapes=[(1, 5)])
    reference = [{"logits": np.zeros((1, 5, 5), np.float32)}]
    with pytest.raises(ParityError, match=message):
        compare("token-classification", batches, reference, [candidate], Tolerance(atol=1.0))
