"""Pre-training from scratch: WordPiece vocabulary (unless given), NSP sentence pairs, MLM + NSP summed loss."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from training.checkpoint import CheckpointError, load_model, save_model
from training.data import DataError, Feature
from training.losses import masked_lm_loss
from training.metrics import MlmAccumulator
from training.model import BertConfig, BertForPreTraining
from training.pretrain_data import MlmCollator, corpus_to_nsp_draws, corpus_to_nsp_features
from training.tokenizer import load_tokenizer, pad_token_id_of, save_tokenizer, train_wordpiece
from training.train import Runtime, TensorBatch, TrainingArguments, train

logger = logging.getLogger(__name__)


@dataclass
class PretrainOptions:
    corpus: Path
    out: Path
    tokenizer: Path | None = None
    vocab_size: int = 8000
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    intermediate: int = 1024
    max_length: int = 128
    eval_fraction: float = 0.05
    max_passes: float = 100.0
    dupe_factor: int = 1  # times the NSP pairs are drawn, each draw with fresh random next sentences
    training: TrainingArguments = field(default_factory=lambda: TrainingArguments(max_steps=1000, learning_rate=1e-4))


def masked_lm_training_loss(model: nn.Module, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss for BertForMaskedLM (fill-mask fine-tuning)."""
    outputs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    loss = masked_lm_loss(outputs["logits"], batch["labels"])
    return loss, {}


def pretraining_loss(model: nn.Module, batch: TensorBatch) -> tuple[torch.Tensor, dict[str, float]]:
    """Summed MLM + NSP loss; both parts are reported. The MLM head runs at the masked positions only."""
    masked = batch["labels"].ne(-100)  # (B, T)
    outputs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], masked_positions=masked)
    mlm = masked_lm_loss(outputs["prediction_logits"], batch["labels"][masked])  # logits (N, V), labels (N,)
    nsp = F.cross_entropy(outputs["seq_relationship_logits"].float(), batch["next_sentence_label"])
    return mlm + nsp, {"mlm_loss": float(mlm.detach()), "nsp_loss": float(nsp.detach())}


def _split(draws: list[list[Feature]], fraction: float, seed: int) -> tuple[list[Feature], list[Feature]]:
    """Pairs held out by their first sentence: held out in draw 0 (the evaluation), left out of every draw."""
    order = list(range(len(draws[0])))
    random.Random(seed).shuffle(order)
    held_out = min(2000, int(len(order) * fraction)) if fraction > 0 else 0
    train_indices = order[held_out:]
    return [draw[i] for draw in draws for i in train_indices], [draws[0][i] for i in order[:held_out]]


def _tokenizer_for(options: PretrainOptions, runtime: Runtime):
    if options.tokenizer is not None:
        try:
            return load_tokenizer(options.tokenizer)
        except FileNotFoundError as error:
            raise DataError(f"--tokenizer {error}") from None
    # One rank trains the vocabulary and the others read it back, so every rank has the very same ids.
    if runtime.is_main:
        tokenizer = train_wordpiece([options.corpus], options.vocab_size)
        save_tokenizer(tokenizer, options.out)
    if runtime.distributed:
        dist.barrier()
    return load_tokenizer(options.out)


def evaluate_pretraining(
    model: nn.Module,
    features: list[Feature],
    tokenizer: Tokenizer,
    pad_token_id: int,
    args: TrainingArguments,
    device: torch.device,
) -> dict[str, float]:
    """MLM top-1/top-5 accuracy, loss and perplexity at masked positions, and NSP accuracy and loss, over features.

    The masks come from a collator seeded with ``args.seed + 1``: every evaluation of the same features masks the
    same positions, so two models (or two steps of one run) are scored on the very same predictions.
    """
    if not features:
        return {}
    collator = MlmCollator(tokenizer, pad_token_id=pad_token_id, seed=args.seed + 1)
    accumulator = MlmAccumulator()
    nsp_correct, nsp_loss = 0, 0.0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(features), args.eval_batch_size):
            batch = collator(features[start : start + args.eval_batch_size])
            batch = {key: value.to(device) for key, value in batch.items()}
            outputs = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            accumulator.add(outputs["prediction_logits"].cpu(), batch["labels"].cpu())
            nsp_logits = outputs["seq_relationship_logits"].float()
            nsp_correct += int((nsp_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            nsp_loss += float(F.cross_entropy(nsp_logits, batch["next_sentence_label"], reduction="sum"))
    scores = accumulator.scores()
    scores.update(nsp_accuracy=nsp_correct / len(features), nsp_loss=nsp_loss / len(features))
    return scores


def pretraining_scores(
    checkpoint: Path, corpus: Path, max_length: int, args: TrainingArguments, *, random_init: bool = False
) -> dict[str, float]:
    """evaluate_pretraining of a BertForPreTraining checkpoint (or, with random_init, of its configuration with
    random weights) on every sentence pair of a held-out corpus, built as pre-training builds them."""
    if not corpus.is_file():
        raise DataError(f"{corpus}: no such file")
    try:
        tokenizer = load_tokenizer(checkpoint)
        pad_token_id = pad_token_id_of(tokenizer, checkpoint)
    except (FileNotFoundError, ValueError) as error:
        raise CheckpointError(f"{checkpoint}: {error}") from None
    torch.manual_seed(args.seed)
    model = load_model(checkpoint, "BertForPreTraining", random_init=random_init)
    features = corpus_to_nsp_features(corpus, tokenizer, max_length, args.seed)
    scores = evaluate_pretraining(model, features, tokenizer, pad_token_id, args, torch.device("cpu"))
    return {**scores, "pairs": len(features)}


def pretrain(options: PretrainOptions, runtime: Runtime) -> dict[str, Any]:
    args = options.training
    if not options.corpus.is_file():
        raise DataError(f"{options.corpus}: no such file")
    tokenizer = _tokenizer_for(options, runtime)
    tokenizer_folder = options.tokenizer or options.out
    try:
        pad_token_id = pad_token_id_of(tokenizer, tokenizer_folder)
    except ValueError as error:
        raise DataError(f"{tokenizer_folder}: {error}") from None
    if options.dupe_factor < 1:
        raise DataError(f"--dupe-factor must be at least 1, got {options.dupe_factor}")
    draws = corpus_to_nsp_draws(options.corpus, tokenizer, options.max_length, args.seed, options.dupe_factor)
    train_features, eval_features = _split(draws, options.eval_fraction, args.seed)
    steps = args.max_steps or 1
    needed = steps * args.batch_size * args.grad_accum * runtime.world_size
    if len(train_features) < args.batch_size * runtime.world_size or needed > options.max_passes * len(train_features):
        raise DataError(
            f"{options.corpus}: too small for the requested steps: {len(train_features)} sentence pairs, but "
            f"--steps {steps} x --batch-size {args.batch_size} needs {needed} samples "
            f"(at most {options.max_passes:g} passes over the corpus and at least one full batch); "
            "use a larger corpus, fewer --steps or a smaller --batch-size"
        )
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=options.hidden,
        num_hidden_layers=options.layers,
        num_attention_heads=options.heads,
        intermediate_size=options.intermediate,
        max_position_embeddings=max(512, options.max_length),
        pad_token_id=pad_token_id,
        architectures=["BertForPreTraining"],
    )
    torch.manual_seed(args.seed)
    model = BertForPreTraining(config)
    if runtime.is_main:
        logger.info(
            "pretraining %s parameters on %d pairs (%d held out), vocabulary %d",
            f"{sum(p.numel() for p in model.parameters()):,}",
            len(train_features),
            len(eval_features),
            config.vocab_size,
        )
    collator = MlmCollator(tokenizer, pad_token_id=config.pad_token_id, seed=args.seed + runtime.rank)

    def evaluate(trained: nn.Module) -> dict[str, float]:
        return evaluate_pretraining(trained, eval_features, tokenizer, config.pad_token_id, args, runtime.device)

    def save(trained: nn.Module, folder: Path) -> None:
        save_model(trained, folder, tokenizer)

    return train(
        model,
        train_features,
        collator,
        args,
        options.out,
        save,
        runtime,
        evaluate=evaluate,
        primary_metric="mlm_top1_accuracy" if eval_features else None,
        loss_fn=pretraining_loss,
    )
