from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from training.data import IGNORE_INDEX, DataError
from training.pretrain_data import (
    IS_NEXT,
    IS_RANDOM,
    MlmCollator,
    build_nsp_pairs,
    corpus_to_nsp_features,
    mask_tokens,
    split_sentences,
)

MASK_ID, VOCAB = 4, 1000


def test_masking_proportions_follow_bert() -> None:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(10, VOCAB, (400, 128), generator=generator)
    special = torch.zeros_like(input_ids)
    special[:, 0] = special[:, -1] = 1
    special[:, 60:70] = 1
    masked, labels = mask_tokens(input_ids, special, MASK_ID, VOCAB, generator=generator)

    chosen = labels != IGNORE_INDEX
    assert not chosen[special.bool()].any()
    assert torch.equal(masked[special.bool()], input_ids[special.bool()])
    assert torch.equal(labels[chosen], input_ids[chosen])
    n_chosen, n_eligible = int(chosen.sum()), int((~special.bool()).sum())
    assert abs(n_chosen / n_eligible - 0.15) < 0.005  # ~7000 chosen of ~46800: 3 sigma is ~0.005

    as_mask = (masked == MASK_ID) & chosen
    unchanged = (masked == input_ids) & chosen
    randomised = chosen & ~as_mask & ~unchanged
    assert abs(int(as_mask.sum()) / n_chosen - 0.8) < 0.02
    # A random replacement equals the original token with probability 1/V, so "unchanged" is ~10% + 0.1%.
    assert abs(int(unchanged.sum()) / n_chosen - 0.1) < 0.015
    assert abs(int(randomised.sum()) / n_chosen - 0.1) < 0.015
    assert torch.equal(masked[~chosen], input_ids[~chosen])


def test_mlm_collator_pads_and_never_masks_padding(tiny_wordpiece) -> None:
    collator = MlmCollator(tiny_wordpiece, mlm_probability=0.9, seed=1)
    features = [
        {"input_ids": [2, 10, 11, 12, 3], "token_type_ids": [0] * 5, "special_tokens_mask": [1, 0, 0, 0, 1]},
        {"input_ids": [2, 10, 3], "token_type_ids": [0] * 3, "special_tokens_mask": [1, 0, 1]},
    ]
    batch = collator(features)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert batch["labels"][1, 3:].tolist() == [IGNORE_INDEX, IGNORE_INDEX]
    assert batch["labels"][:, 0].tolist() == [IGNORE_INDEX, IGNORE_INDEX]
    assert batch["input_ids"][1, 3:].tolist() == [0, 0]


def test_nsp_pairs_are_half_next_half_random() -> None:
    # Token ids encode (document, sentence) so the test can tell where each B came from.
    documents = [[[d * 100 + s] * 3 for s in range(6)] for d in range(60)]
    pairs = build_nsp_pairs(documents, max_length=32, rng=random.Random(0))
    assert len(pairs) == 60 * 5
    next_share = sum(label == IS_NEXT for *_, label in pairs) / len(pairs)
    assert abs(next_share - 0.5) < 0.09  # 300 pairs: 3 sigma = 0.087
    for first, second, label in pairs:
        document = first[0] // 100
        if label == IS_NEXT:
            assert second[0] == first[0] + 1
        else:
            assert label == IS_RANDOM and second[0] // 100 != document


def test_nsp_pairs_are_truncated_to_fit() -> None:
    documents = [[[1] * 40, [2] * 10], [[3] * 5, [4] * 5]]
    pairs = build_nsp_pairs(documents, max_length=20, rng=random.Random(0))
    assert all(len(a) + len(b) <= 17 for a, b, _ in pairs)


def test_corpus_features_and_too_small_corpus(tmp_path: Path, tiny_wordpiece) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The fox jumps. The dog sleeps. A cat.\n\nPeter visited Brussels. He said so.\n")
    assert split_sentences("The fox jumps. The dog sleeps! Yes? ok") == [
        "The fox jumps.",
        "The dog sleeps!",
        "Yes?",
        "ok",
    ]
    features = corpus_to_nsp_features(corpus, tiny_wordpiece, max_length=32, seed=0)
    assert len(features) == 3
    cls_id, sep_id = tiny_wordpiece.token_to_id("[CLS]"), tiny_wordpiece.token_to_id("[SEP]")
    for feature in features:
        ids = feature["input_ids"]
        assert ids[0] == cls_id and ids.count(sep_id) == 2 and ids[-1] == sep_id
        assert feature["special_tokens_mask"] == [int(i in (cls_id, sep_id)) for i in ids]
    corpus.write_text("Only one document here. With two sentences.\n")
    with pytest.raises(DataError, match=str(corpus)):
        corpus_to_nsp_features(corpus, tiny_wordpiece, max_length=32, seed=0)


def test_mlm_collator_pads_with_the_tokenizers_pad_id_or_the_one_it_is_given(tiny_wordpiece) -> None:
    features = [
        {"input_ids": [2, 10, 11, 3], "token_type_ids": [0] * 4, "special_tokens_mask": [1, 0, 0, 1]},
        {"input_ids": [2, 3], "token_type_ids": [0] * 2, "special_tokens_mask": [1, 1]},
    ]
    default = MlmCollator(tiny_wordpiece, mlm_probability=0.0)
    assert default.pad_token_id == tiny_wordpiece.token_to_id("[PAD]")
    assert default(features)["input_ids"][1, 2:].tolist() == [default.pad_token_id] * 2
    given = MlmCollator(tiny_wordpiece, pad_token_id=7, mlm_probability=0.0)
    batch = given(features)
    assert batch["input_ids"][1, 2:].tolist() == [7, 7]
    assert batch["labels"][1, 2:].tolist() == [IGNORE_INDEX, IGNORE_INDEX]


def test_mlm_collator_refuses_a_tokenizer_without_a_pad_token() -> None:
    from tokenizers import Tokenizer, models

    vocab = {token: index for index, token in enumerate(["[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])}
    with pytest.raises(DataError, match=r"\[PAD\]"):
        MlmCollator(Tokenizer(models.WordPiece(vocab, unk_token="[UNK]")))


def test_each_draw_keeps_sentence_a_and_draws_its_next_sentence_afresh(tmp_path: Path, tiny_wordpiece) -> None:
    from training.pretrain import _split
    from training.pretrain_data import corpus_to_nsp_draws

    lines = [f"Story {d} begins here. It goes on with {d}. Then {d} ends. Finally {d} is over." for d in range(12)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    draws = corpus_to_nsp_draws(corpus, tiny_wordpiece, max_length=64, seed=0, draws=6)
    assert draws[0] == corpus_to_nsp_features(corpus, tiny_wordpiece, max_length=64, seed=0)  # draw 0 is today's

    def sentence_a(feature) -> list[int]:  # type: ignore[no-untyped-def]
        return feature["input_ids"][1 : feature["token_type_ids"].index(1) - 1]

    assert all(len(draw) == len(draws[0]) == 36 for draw in draws)
    for i in range(36):
        assert len({tuple(sentence_a(draw[i])) for draw in draws}) == 1
    labels = [[draw[i]["next_sentence_label"][0] for draw in draws] for i in range(36)]
    assert sum(len(set(row)) > 1 for row in labels) > 18  # most pairs change label between draws
    train, held_out = _split(draws, fraction=0.25, seed=0)
    assert len(held_out) == 9 and len(train) == 6 * 27
    held_indices = {next(i for i, f in enumerate(draws[0]) if f is held) for held in held_out}
    trained = {id(f) for f in train}
    assert all(id(draw[i]) not in trained for draw in draws for i in held_indices)  # held out of every draw
