"""BERT pre-training data: whole corpus -> sentence pairs for next-sentence prediction, and MLM masking.

Masking follows the BERT paper: 15% of the non-special tokens are chosen; of those 80% become [MASK], 10% a
random token and 10% stay unchanged; only chosen tokens carry a label (others -100).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from training.data import IGNORE_INDEX, DataError, Feature, collate, read_text_lines
from training.tokenizer import pad_token_id_of

IS_NEXT, IS_RANDOM = 0, 1  # Hugging Face's next_sentence_label: 0 = B continues A, 1 = B is random
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


def mask_tokens(
    input_ids: torch.Tensor,
    special_tokens_mask: torch.Tensor,
    mask_token_id: int,
    vocab_size: int,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids, special_tokens_mask: (batch, seq) -> (masked input_ids, labels with -100 where not chosen)."""
    labels = input_ids.clone()
    probability = torch.full(input_ids.shape, mlm_probability)
    probability.masked_fill_(special_tokens_mask.bool(), 0.0)
    chosen = torch.bernoulli(probability, generator=generator).bool()
    labels[~chosen] = IGNORE_INDEX
    masked = input_ids.clone()
    to_mask = torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool() & chosen
    masked[to_mask] = mask_token_id
    # Half of the remaining 20% -> 10% of the chosen tokens overall get a random token.
    to_randomise = torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool() & chosen & ~to_mask
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, dtype=input_ids.dtype)
    masked[to_randomise] = random_ids[to_randomise]
    return masked, labels


class MlmCollator:
    """Pads a batch and masks it afresh each time (dynamic masking, as RoBERTa and HF's collator do)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        pad_token_id: int | None = None,
        mlm_probability: float = 0.15,
        seed: int = 0,
        mask_token: str = "[MASK]",
    ):
        mask_id = tokenizer.token_to_id(mask_token)
        if mask_id is None:
            raise DataError(f"tokenizer has no {mask_token} token")
        self.mask_token_id = mask_id
        self.vocab_size = tokenizer.get_vocab_size()
        if pad_token_id is None:  # the tokenizer's own [PAD]
            try:
                pad_token_id = pad_token_id_of(tokenizer)
            except ValueError as error:
                raise DataError(str(error)) from None
        self.pad_token_id = pad_token_id
        self.mlm_probability = mlm_probability
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, features: Sequence[Feature]) -> dict[str, torch.Tensor]:
        batch = collate(features, self.pad_token_id)
        special = batch.pop("special_tokens_mask")
        batch["input_ids"], batch["labels"] = mask_tokens(
            batch["input_ids"], special, self.mask_token_id, self.vocab_size, self.mlm_probability, self.generator
        )
        return batch


def split_sentences(paragraph: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(paragraph.strip()) if s]


def read_corpus_documents(path: Path) -> list[list[str]]:
    """One document per non-blank line (a paragraph, as in WikiText), split into sentences."""
    return [split_sentences(line) for line in read_text_lines(path)]


def build_nsp_pairs(
    documents: Sequence[Sequence[Sequence[int]]], max_length: int, rng: random.Random
) -> list[tuple[list[int], list[int], int]]:
    """(tokens A, tokens B, label): B is A's next sentence half the time, else a sentence of another document.

    documents: token ids without special tokens, per sentence per document. Pairs are truncated, longer side
    first, to fit `max_length` with [CLS] and two [SEP].
    """
    sentences = [(d, s) for d, document in enumerate(documents) for s in range(len(document)) if document[s]]
    if len({d for d, _ in sentences}) < 2:
        raise DataError("the corpus needs at least two non-empty documents (lines) to draw random next sentences")
    pairs = []
    budget = max_length - 3
    for d, document in enumerate(documents):
        for s in range(len(document) - 1):
            first = list(document[s])
            if not first or not document[s + 1]:
                continue
            if rng.random() < 0.5:
                second, label = list(document[s + 1]), IS_NEXT
            else:
                while True:
                    other_d, other_s = sentences[rng.randrange(len(sentences))]
                    if other_d != d:
                        break
                second, label = list(documents[other_d][other_s]), IS_RANDOM
            while len(first) + len(second) > budget:
                (first if len(first) >= len(second) else second).pop()
            pairs.append((first, second, label))
    return pairs


def encode_nsp_pairs(pairs: Sequence[tuple[list[int], list[int], int]], cls_id: int, sep_id: int) -> list[Feature]:
    features = []
    for first, second, label in pairs:
        input_ids = [cls_id, *first, sep_id, *second, sep_id]
        features.append(
            {
                "input_ids": input_ids,
                "token_type_ids": [0] * (len(first) + 2) + [1] * (len(second) + 1),
                "special_tokens_mask": [1] + [0] * len(first) + [1] + [0] * len(second) + [1],
                "next_sentence_label": [label],
            }
        )
    return features


def corpus_to_nsp_draws(
    path: Path, tokenizer: Tokenizer, max_length: int, seed: int, draws: int = 1
) -> list[list[Feature]]:
    """The corpus's sentence pairs drawn ``draws`` times (BERT's dupe_factor): pair i of every draw starts with the
    same sentence A, while whether B is the next sentence or a random one, and which, is drawn afresh per draw, so
    many passes over a small corpus cannot memorise the NSP labels. Draw 0 uses ``seed``, draw k ``seed + k``."""
    documents = read_corpus_documents(path)
    sentence_lists = [[enc.ids for enc in tokenizer.encode_batch(d, add_special_tokens=False)] for d in documents]
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    result = []
    for draw in range(draws):
        try:
            pairs = build_nsp_pairs(sentence_lists, max_length, random.Random(seed + draw))
        except DataError as error:
            raise DataError(f"{path}: {error}") from None
        if not pairs:
            raise DataError(f"{path}: no line has two sentences, so no next-sentence pairs can be built")
        result.append(encode_nsp_pairs(pairs, cls_id, sep_id))
    return result


def corpus_to_nsp_features(path: Path, tokenizer: Tokenizer, max_length: int, seed: int) -> list[Feature]:
    return corpus_to_nsp_draws(path, tokenizer, max_length, seed)[0]
