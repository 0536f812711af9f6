"""Fill-mask evaluation scores the whole-word probes of contract.mask_probes, the ones /v1/fill-mask is sent."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from contract.mask_probes import MaskProbe, mask_probes
from tests.training.conftest import TINY_BERT_CONFIG, TINY_CORPUS
from training.data import DataError, read_text_lines
from training.evaluation import MaskedWordEvaluation
from training.finetune import TASK_BUILDERS, FinetuneOptions, TaskContext, _predictor
from training.model import ARCHITECTURES, BertConfig
from training.train import TrainingArguments

PAD_ID = 7  # not the tokenizer's 0: padding must not matter to the scores
MAX_LENGTH = 48
# One vocabulary token each in the tiny tokenizer: lines of them give masks with varied answers.
ONE_TOKEN_WORDS = ["the", "fox", "river", "old", "dog", "said", "great", "movie", "plot", "bank", "mill", "lazy"]


def eval_lines() -> list[str]:
    shifted = [
        " ".join(ONE_TOKEN_WORDS[(shift + i) % len(ONE_TOKEN_WORDS)] for i in range(15 + shift)) for shift in range(6)
    ]
    return [*TINY_CORPUS, *shifted]


def options(tmp_path: Path, eval_file: Path) -> FinetuneOptions:
    return FinetuneOptions(
        task="fill-mask", base=tmp_path / "base", train_file=eval_file, out=tmp_path / "out", eval_file=eval_file,
        max_length=MAX_LENGTH, training=TrainingArguments(eval_batch_size=2),
    )  # fmt: skip


def tiny_masked_lm(tokenizer: Tokenizer, favoured: int) -> torch.nn.Module:
    """A random BertForMaskedLM whose output bias favours one token, so top-1 is neither 0 nor 1."""
    torch.manual_seed(0)
    config = BertConfig(**{**TINY_BERT_CONFIG, "vocab_size": tokenizer.get_vocab_size()})
    model = ARCHITECTURES["BertForMaskedLM"](config).eval()
    with torch.no_grad():
        model.cls.predictions.bias[favoured] += 20.0
    return model


def direct_scores(model: torch.nn.Module, tokenizer: Tokenizer, probes: list[MaskProbe]) -> dict[str, float]:
    """Each probe alone (no padding, no batching): the logits at its mask ids against its answers."""
    mask_id = tokenizer.token_to_id("[MASK]")
    top1 = top5 = 0
    losses = []
    for probe in probes:
        encoding = tokenizer.encode(probe.text)
        with torch.no_grad():
            logits = model(torch.tensor([encoding.ids]), token_type_ids=torch.tensor([encoding.type_ids]))["logits"][0]
        positions = [index for index, token_id in enumerate(encoding.ids) if token_id == mask_id]
        assert len(positions) == len(probe.answers)
        for position, answer in zip(positions, probe.answers, strict=True):
            row = logits[position]
            top1 += int(row.argmax()) == answer
            top5 += answer in row.topk(5).indices.tolist()
            losses.append(float(F.cross_entropy(row[None], torch.tensor([answer]))))
    masks = len(losses)
    return {"mlm_top1_accuracy": top1 / masks, "mlm_top5_accuracy": top5 / masks, "mlm_loss": sum(losses) / masks}


def test_fill_mask_evaluation_equals_a_direct_argmax_at_the_masks(tiny_wordpiece: Tokenizer, tmp_path: Path) -> None:
    eval_file = tmp_path / "eval.txt"
    eval_file.write_text("\n".join(eval_lines()) + "\n")
    probes = mask_probes(read_text_lines(eval_file), tiny_wordpiece, max_length=MAX_LENGTH)
    answers = Counter(answer for probe in probes for answer in probe.answers)
    assert sum(answers.values()) >= 12 and len(answers) >= 4
    favoured = answers.most_common(1)[0][0]
    model = tiny_masked_lm(tiny_wordpiece, favoured)
    expected = direct_scores(model, tiny_wordpiece, probes)
    assert 0 < expected["mlm_top1_accuracy"] < 1

    context = TaskContext(tiny_wordpiece, PAD_ID, torch.device("cpu"))
    data = TASK_BUILDERS["fill-mask"](options(tmp_path, eval_file), context)
    assert data.evaluate is not None
    scores = data.evaluate(model)
    assert scores["mlm_top1_accuracy"] == expected["mlm_top1_accuracy"]
    assert scores["mlm_top5_accuracy"] == expected["mlm_top5_accuracy"]
    assert scores["mlm_loss"] == pytest.approx(expected["mlm_loss"], rel=1e-4)
    assert data.evaluate(model) == scores  # the same masks every evaluation

    # Chunked and batched differently (3 probes per predict call, batches of 2): the same scores.
    evaluation = MaskedWordEvaluation.build(tiny_wordpiece, read_text_lines(eval_file), MAX_LENGTH)
    assert evaluation.probes == probes
    chunked = evaluation.scores(model, _predictor(options(tmp_path, eval_file), context), chunk=3)
    assert chunked["mlm_top1_accuracy"] == scores["mlm_top1_accuracy"]
    assert chunked["mlm_top5_accuracy"] == scores["mlm_top5_accuracy"]
    assert chunked["mlm_loss"] == pytest.approx(scores["mlm_loss"], rel=1e-4)


def test_labels_hold_the_answers_exactly_at_the_mask_ids(tiny_wordpiece: Tokenizer) -> None:
    evaluation = MaskedWordEvaluation.build(tiny_wordpiece, eval_lines(), MAX_LENGTH)
    mask_id = tiny_wordpiece.token_to_id("[MASK]")
    for probe, feature, labels in zip(evaluation.probes, evaluation.features, evaluation.labels, strict=True):
        assert feature["input_ids"] == tiny_wordpiece.encode(probe.text).ids
        assert len(labels) == len(feature["input_ids"])
        at_masks = [label for token_id, label in zip(feature["input_ids"], labels, strict=True) if token_id == mask_id]
        assert tuple(at_masks) == probe.answers
        assert sum(label != -100 for label in labels) == len(probe.answers)


def test_an_eval_file_with_nothing_to_mask_is_a_data_error(tiny_wordpiece: Tokenizer, tmp_path: Path) -> None:
    eval_file = tmp_path / "short.txt"
    eval_file.write_text("the fox said so.\nthe old mill near the river bank.\n")
    context = TaskContext(tiny_wordpiece, PAD_ID, torch.device("cpu"))
    with pytest.raises(DataError, match="no line") as raised:
        TASK_BUILDERS["fill-mask"](options(tmp_path, eval_file), context)
    assert str(eval_file) in str(raised.value)
