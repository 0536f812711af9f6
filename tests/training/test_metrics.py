from __future__ import annotations

import collections
import math
import random
import re
import string

import pytest
import torch

from training.metrics import (
    MlmAccumulator,
    accuracy,
    chunks,
    classification_metrics,
    entity_metrics,
    macro_f1,
    normalize_answer,
    squad_metrics,
)

# --- reference: the official SQuAD v1.1 evaluation script's functions, verbatim in logic ---------------------


def official_normalize_answer(s: str) -> str:
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1(prediction: str, ground_truth: str) -> float:
    prediction_tokens = official_normalize_answer(prediction).split()
    ground_truth_tokens = official_normalize_answer(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def official_em(prediction: str, ground_truth: str) -> bool:
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


CASES = [
    ("The Denver Broncos", ["Denver Broncos", "the denver broncos!"]),
    ("Broncos", ["Denver Broncos"]),
    ("in 1998, an era", ["1998", "an era of 1998"]),
    ("Santa Clara, California", ["Levi's Stadium", "Santa Clara"]),
    ("nothing here", ["totally different"]),
    ("  A  cat's  toy. ", ["cats toy"]),
]


@pytest.mark.parametrize(
    ("text", "expected"), [("The  Cat!", "cat"), ("an apple, a day", "apple day"), ("Theatre", "theatre")]
)
def test_normalisation_examples(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected == official_normalize_answer(text)


def test_squad_scores_match_the_official_script() -> None:
    predictions = {str(i): prediction for i, (prediction, _) in enumerate(CASES)}
    golds = {str(i): answers for i, (_, answers) in enumerate(CASES)}
    expected_em = 100 * sum(max(official_em(p, g) for g in gs) for p, gs in CASES) / len(CASES)
    expected_f1 = 100 * sum(max(official_f1(p, g) for g in gs) for p, gs in CASES) / len(CASES)
    scores = squad_metrics(predictions, golds)
    assert scores["exact_match"] == pytest.approx(expected_em)
    assert scores["f1"] == pytest.approx(expected_f1)
    assert 0 < expected_em < expected_f1 < 100


def test_squad_v2_empty_answers() -> None:
    scores = squad_metrics({"a": "", "b": "x", "c": ""}, {"a": [], "b": [], "c": ["x"]})
    assert scores == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(100 / 3)}


def test_accuracy_and_macro_f1_by_hand() -> None:
    gold = [0, 0, 1, 1, 2]
    predicted = [0, 1, 1, 1, 0]
    # class 0: tp 1, pred 2, gold 2 -> 0.5; class 1: tp 2, pred 3, gold 2 -> 0.8; class 2: tp 0 -> 0
    assert accuracy(gold, predicted) == pytest.approx(0.6)
    assert macro_f1(gold, predicted) == pytest.approx((0.5 + 0.8 + 0.0) / 3)
    assert classification_metrics([1, 1], [1, 1]) == {"accuracy": 1.0, "macro_f1": 1.0}


# --- reference: an independent IOB1/IOB2 chunker ---------------------------------------------------------------


def reference_chunks(tags: list[str]) -> set[tuple[int, int, str]]:
    """A chunk starts at B-X, or at I-X not continuing a chunk of type X; it continues only with I-X."""
    found, start, current = set(), None, None
    for index, tag in enumerate([*tags, "O"]):
        kind, _, entity_type = tag.partition("-")
        continues = kind == "I" and start is not None and entity_type == current
        if start is not None and not continues:
            found.add((start, index - 1, current))
            start = None
        if kind in ("B", "I") and not continues:
            start, current = index, entity_type
    return found


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        (["B-PER", "I-PER", "O", "B-LOC"], {(0, 1, "PER"), (3, 3, "LOC")}),
        (["I-PER", "I-PER", "B-PER", "I-PER"], {(0, 1, "PER"), (2, 3, "PER")}),  # IOB1
        (["O", "I-ORG", "I-LOC", "B-LOC"], {(1, 1, "ORG"), (2, 2, "LOC"), (3, 3, "LOC")}),
        (["B-MISC", "B-MISC", "I-MISC"], {(0, 0, "MISC"), (1, 2, "MISC")}),
    ],
)
def test_chunks_by_hand(tags: list[str], expected: set) -> None:
    assert chunks(tags) == expected == reference_chunks(tags)


def test_chunks_match_the_reference_on_random_sequences() -> None:
    rng = random.Random(0)
    vocabulary = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    for _ in range(500):
        tags = [rng.choice(vocabulary) for _ in range(rng.randint(0, 12))]
        assert chunks(tags) == reference_chunks(tags)


def test_entity_counts_by_hand() -> None:
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-PER"]]
    # gold chunks 3; predicted 4; correct: PER(0-1) and ORG in sentence 2 -> 2
    scores = entity_metrics(gold, predicted)
    assert scores["precision"] == pytest.approx(2 / 4)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert scores["token_accuracy"] == pytest.approx(4 / 6)
    assert scores["PER_precision"] == pytest.approx(1 / 2) and scores["PER_recall"] == 1.0
    assert scores["LOC_recall"] == 0.0


def test_mlm_accumulator_against_a_loop() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 11, generator=generator)
    labels = torch.randint(0, 11, (3, 7), generator=generator)
    labels[torch.rand(3, 7, generator=generator) < 0.5] = -100
    accumulator = MlmAccumulator()
    accumulator.add(logits[:2], labels[:2])
    accumulator.add(logits[2:], labels[2:])
    top1 = top5 = count = 0
    loss = 0.0
    for b in range(3):
        for t in range(7):
            if labels[b, t] == -100:
                continue
            ranked = sorted(range(11), key=lambda v, b=b, t=t: -float(logits[b, t, v]))
            top1 += ranked[0] == labels[b, t]
            top5 += int(labels[b, t]) in ranked[:5]
            loss -= float(torch.log_softmax(logits[b, t], dim=-1)[labels[b, t]])
            count += 1
    scores = accumulator.scores()
    assert scores["mlm_top1_accuracy"] == pytest.approx(top1 / count)
    assert scores["mlm_top5_accuracy"] == pytest.approx(top5 / count)
    assert scores["perplexity"] == pytest.approx(math.exp(loss / count), rel=1e-5)
