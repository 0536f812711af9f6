"""Tiny random checkpoints of each BERT-family encoder, each with the kind of tokenizer the family really uses.

Tests and the family benchmark build them offline, the same on every run: the tokenizer is learnt from sentences made
from a fixed word list (WordPiece for BERT/DistilBERT/ELECTRA/MPNet, byte-level BPE for RoBERTa/ModernBERT,
Unigram with Metaspace for XLM-RoBERTa/CamemBERT/ALBERT/DeBERTa-v2), wrapped in the family's own fast-tokenizer
class and saved with ``save_pretrained`` beside a random model of the asked head, so that transformers' pipelines
load the folder as they would a Hub checkpoint. Export-time only (needs torch and transformers).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.tasks import task_spec

WORDS = """
the a an of to in for with on at by from as and or but is are was were be been have has had do does did not no yes
i you he she it we they me him her us them my your his its our their this that these those there here what who
which when where why how all any both each few more most other some such only own same so than too very can will
just should now one two three four five first last new old good bad great small large big long short high low
movie film story actor plot scene music song book play game team city country world year day time people man woman
child family friend house home school work money life love war john mary paul peter james anna maria smith brown
paris london berlin rome madrid tokyo york boston france germany italy spain japan china europe river mountain
google apple microsoft amazon bank university company club party government monday friday january march june said
make made go went come came see saw know think take give get find tell ask use want look like feel become leave
call try keep begin seem help show hear run live believe bring happen write sit stand lose pay meet learn
wonderful terrible awful boring funny beautiful brilliant excellent poor worst amazing dull question answer
""".split()  # noqa: SIM905
NAMES = ["John", "Mary", "Paris", "London", "Google", "Berlin", "Anna", "Smith", "Tokyo", "Europe"]
PUNCTUATION = [".", ",", "!", "?", "'s", "-", "(", ")", "%", "$", "&"]


def corpus(lines: int = 600, seed: int = 0) -> Iterator[str]:
    """Sentences of the word list with capitalised names, punctuation and digits: what the tokenizers train on."""
    generator = random.Random(seed)
    for _ in range(lines):
        words = [generator.choice(WORDS) for _ in range(generator.randint(4, 14))]
        words.insert(generator.randrange(len(words)), generator.choice(NAMES))
        if generator.random() < 0.3:
            words.insert(generator.randrange(len(words)), str(generator.randint(0, 2024)))
        text = " ".join(words)
        yield text[0].upper() + text[1:] + generator.choice(PUNCTUATION[:3])
        yield " ".join(generator.choice(PUNCTUATION + WORDS) for _ in range(6))


@dataclass(frozen=True)
class FamilyKit:
    """How one family's checkpoint is made: its config class and sizes, its tokenizer kind and special tokens."""

    model_type: str
    prefix: str  # transformers class prefix: DistilBert, Roberta, ...
    tokenizer_kind: str  # wordpiece | bpe | unigram
    specials: dict[str, str]  # cls, sep, pad, mask, unk
    config: dict[str, Any]
    tokenizer_class: str  # the family's fast tokenizer in transformers
    position_offset: int = 0  # RoBERTa-style models number positions from pad_token_id + 1


_BERT_SPECIALS = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]", "mask": "[MASK]", "unk": "[UNK]"}
_ROBERTA_SPECIALS = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "mask": "<mask>", "unk": "<unk>"}
_LAYERS = {"num_hidden_layers": 2, "num_attention_heads": 2, "hidden_size": 32, "intermediate_size": 64}

KITS: dict[str, FamilyKit] = {
    kit.model_type: kit
    for kit in (
        FamilyKit("bert", "Bert", "wordpiece", _BERT_SPECIALS, {**_LAYERS}, "BertTokenizerFast"),
        FamilyKit(
            "distilbert", "DistilBert", "wordpiece", _BERT_SPECIALS,
            {"n_layers": 2, "n_heads": 2, "dim": 32, "hidden_dim": 64}, "DistilBertTokenizerFast",
        ),
        FamilyKit("roberta", "Roberta", "bpe", _ROBERTA_SPECIALS, {**_LAYERS, "type_vocab_size": 1},
                  "RobertaTokenizerFast", position_offset=2),
        FamilyKit("xlm-roberta", "XLMRoberta", "unigram", _ROBERTA_SPECIALS, {**_LAYERS, "type_vocab_size": 1},
                  "XLMRobertaTokenizerFast", position_offset=2),
        FamilyKit("camembert", "Camembert", "unigram", _ROBERTA_SPECIALS, {**_LAYERS, "type_vocab_size": 1},
                  "CamembertTokenizerFast", position_offset=2),
        FamilyKit("electra", "Electra", "wordpiece", _BERT_SPECIALS, {**_LAYERS, "embedding_size": 16},
                  "ElectraTokenizerFast"),
        FamilyKit(
            "albert", "Albert", "unigram", {**_BERT_SPECIALS, "pad": "<pad>", "unk": "<unk>"},
            {**_LAYERS, "embedding_size": 16}, "AlbertTokenizerFast",
        ),
        FamilyKit(
            "deberta-v2", "DebertaV2", "unigram", _BERT_SPECIALS,
            {**_LAYERS, "type_vocab_size": 0, "relative_attention": True, "position_buckets": 16,
             "pos_att_type": ["p2c", "c2p"], "position_biased_input": False, "max_relative_positions": -1},
            "DebertaV2TokenizerFast",
        ),
        FamilyKit("mpnet", "MPNet", "wordpiece", _ROBERTA_SPECIALS, {**_LAYERS}, "MPNetTokenizerFast",
                  position_offset=2),
        FamilyKit(
            "modernbert", "ModernBert", "bpe", _BERT_SPECIALS,
            {**_LAYERS, "global_attn_every_n_layers": 2, "local_attention": 8, "reference_compile": False},
            "PreTrainedTokenizerFast",
        ),
    )
}  # fmt: skip

# The heads this builder makes test checkpoints for (each task's head class is the task table's).
BUILT_TASKS = ("text-classification", "token-classification", "question-answering", "fill-mask", "feature-extraction")
LABELS = {
    "text-classification": ["negative", "positive"],
    "token-classification": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"],
}


def words_of(tokenizer: Any, texts: Iterable[str]) -> Counter[str]:
    """How often each pre-token (normalised, pre-tokenised as ``tokenizer`` does) occurs in ``texts``."""
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer is not None else str
    return Counter(word for text in texts for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalize(text)))


def wordpiece_vocab(tokenizer: Any, texts: Iterable[str], size: int, specials: list[str]) -> dict[str, int]:
    """Specials, every character alone and as ``##`` continuation, then the most frequent words (ties by spelling).

    Words left out (rarer, or longer forms such as "lives" beside "live") split into pieces, as WordPiece does."""
    words = words_of(tokenizer, texts)
    characters = sorted({character for word in words for character in word})
    pieces = [*specials, *characters, *(f"##{character}" for character in characters)]
    ranked = sorted((word for word in words if len(word) > 1), key=lambda word: (-words[word], word))
    pieces += ranked[: max(0, size - len(pieces))]
    return {piece: index for index, piece in enumerate(dict.fromkeys(pieces))}


def unigram_vocab(tokenizer: Any, texts: Iterable[str], size: int, specials: list[str]) -> list[tuple[str, float]]:
    """Specials, then characters and the most frequent whole pre-tokens, scored by their log frequency.

    A word costs one piece's log-probability, its characters several, so known words stay whole and the rest
    split; every character of the corpus has a piece, so nothing in it becomes unknown."""
    words = words_of(tokenizer, texts)
    counts: Counter[str] = Counter()
    for word, count in words.items():
        for character in word:
            counts[character] += count
    ranked = sorted((word for word in words if len(word) > 1), key=lambda word: (-words[word], word))
    counts.update({word: words[word] for word in ranked[: max(0, size - len(specials) - len(counts))]})
    total = sum(counts.values())
    ordered = sorted(counts, key=lambda piece: (-counts[piece], piece))
    return [*((special, 0.0) for special in specials), *((piece, math.log(counts[piece] / total)) for piece in ordered)]


def train_tokenizer(kit: FamilyKit) -> Any:
    """A ``tokenizers.Tokenizer`` of the family's kind, learnt from ``corpus()``, with the family's pair template.

    The same on every run and machine: byte-level BPE is trained (its merges are reproducible); WordPiece and Unigram
    vocabularies are counted here, as ``tokenizers``' trainers for them break ties in hash order (another vocabulary,
    so another random model and other near-ties at the pipelines' top-k cuts, each run)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    specials = kit.specials
    # Ids as the families number them: <s> <pad> </s> <unk> (RoBERTa's pad is 1), [PAD] [UNK] [CLS] [SEP] (BERT's 0).
    order = ("cls", "pad", "sep", "unk", "mask") if specials["cls"] == "<s>" else ("pad", "unk", "cls", "sep", "mask")
    special_list = list(dict.fromkeys(specials[role] for role in order))
    if kit.tokenizer_kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=specials["unk"]))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        vocab = wordpiece_vocab(tokenizer, corpus(), 400, special_list)
        tokenizer.model = models.WordPiece(vocab, unk_token=specials["unk"])
    elif kit.tokenizer_kind == "bpe":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer: Any = trainers.BpeTrainer(
            vocab_size=500, special_tokens=special_list, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
        tokenizer.train_from_iterator(corpus(), trainer)
    else:
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.Sequence([normalizers.Replace("``", '"'), normalizers.NFKC()])
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        pieces = unigram_vocab(tokenizer, corpus(), 400, special_list)
        tokenizer.model = models.Unigram(pieces, unk_id=special_list.index(specials["unk"]), byte_fallback=False)
    tokenizer.add_special_tokens(special_list)  # matched whole in text ("[MASK]"), as trainers register them
    cls, sep = specials["cls"], specials["sep"]
    cls_id, sep_id = tokenizer.token_to_id(cls), tokenizer.token_to_id(sep)
    if kit.prefix in ("Roberta", "XLMRoberta", "Camembert", "MPNet"):
        # <s> A </s></s> B </s>: RoBERTa's template (one token type).
        if kit.tokenizer_kind == "bpe":
            tokenizer.post_processor = processors.RobertaProcessing((sep, sep_id), (cls, cls_id), trim_offsets=True,
                                                                    add_prefix_space=False)  # fmt: skip
        else:
            tokenizer.post_processor = processors.TemplateProcessing(
                single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} {sep} $B {sep}", special_tokens=[(cls, cls_id),
                                                                                              (sep, sep_id)],
            )  # fmt: skip
    else:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1", special_tokens=[(cls, cls_id),
                                                                                          (sep, sep_id)],
        )  # fmt: skip
    return tokenizer


def build_family_checkpoint(
    model_type: str, task: str, folder: Path, seed: int = 0, sizes: dict[str, Any] | None = None
) -> Path:
    """A random ``model_type`` checkpoint with the ``task`` head and its family's tokenizer, saved in ``folder``.

    ``sizes`` overrides the tiny layer sizes (the benchmark's base-sized models)."""
    import torch
    import transformers

    kit = KITS[model_type]
    tokenizer = getattr(transformers, kit.tokenizer_class)(
        tokenizer_object=train_tokenizer(kit),
        model_max_length=128 if sizes is None else 512,
        **{f"{role}_token": token for role, token in kit.specials.items()},
        **({"bos_token": kit.specials["cls"], "eos_token": kit.specials["sep"]} if kit.prefix != "Bert" else {}),
        # ModernBERT's tokenizer (a plain PreTrainedTokenizerFast) is told that the model takes no segments.
        **({"model_input_names": ["input_ids", "attention_mask"]} if model_type == "modernbert" else {}),
    )
    labels = LABELS.get(task, [])
    config_class = transformers.AutoConfig.for_model(model_type).__class__
    values: dict[str, Any] = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    if sizes is None:
        values["max_position_embeddings"] = 128 + kit.position_offset
    values.update(kit.config)
    values.update(sizes or {})
    if labels:
        values.update(id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
    config = config_class(**values)
    if model_type in ("roberta", "xlm-roberta", "camembert", "mpnet"):
        config.bos_token_id, config.eos_token_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    torch.manual_seed(seed)
    model = getattr(transformers, kit.prefix + task_spec(task).head)(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            # Random biases and norms, so that a graph that drops one is caught by parity.
            if name.endswith("bias") or "norm" in name.lower():
                parameter.normal_(0.0 if name.endswith("bias") else 1.0, 0.1)
            # Decisive heads: near-uniform scores tie at the pipelines' top-k cuts, where float rounding picks.
            if name.startswith(("qa_outputs.", "classifier.")) and name.endswith("weight"):
                parameter.mul_(30.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# Base-sized layers per family (the published base models' shapes), for the serving benchmark.
BASE_SIZES: dict[str, dict[str, Any]] = {
    "distilbert": {"n_layers": 6, "n_heads": 12, "dim": 768, "hidden_dim": 3072},
    "roberta": {"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768, "intermediate_size": 3072},
}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m model_export.family_checkpoints", description=__doc__)
    parser.add_argument("model_type", choices=sorted(KITS))
    parser.add_argument("task", choices=sorted(BUILT_TASKS))
    parser.add_argument("out", type=Path)
    parser.add_argument("--base", action="store_true", help=f"base-sized layers ({', '.join(BASE_SIZES)})")
    args = parser.parse_args(argv)
    sizes = BASE_SIZES[args.model_type] if args.base else None
    build_family_checkpoint(args.model_type, args.task, args.out, sizes=sizes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
