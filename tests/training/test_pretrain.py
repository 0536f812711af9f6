from __future__ import annotations

import torch
import torch.nn.functional as F

from training import model as model_module
from training import pretrain as pretrain_module
from training.losses import masked_lm_loss
from training.model import BertConfig, BertForMaskedLM, BertForPreTraining
from training.pretrain import masked_lm_training_loss, pretraining_loss


def tiny_pretraining_model() -> BertForPreTraining:
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    return BertForPreTraining(config)


def batch_with_labels(labels: torch.Tensor) -> dict[str, torch.Tensor]:
    input_ids = torch.randint(5, 40, labels.shape, generator=torch.Generator().manual_seed(0))
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "token_type_ids": torch.zeros_like(input_ids),
        "labels": labels,
        "next_sentence_label": torch.tensor([0, 1]),
    }


def test_mlm_loss_is_the_mean_over_labelled_positions() -> None:
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([[-100, 3, -100, 6, -100], [1, -100, -100, -100, -100]])
    expected = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1))  # torch's own ignore_index mean
    assert torch.allclose(masked_lm_loss(logits, labels), expected)


def test_a_batch_without_masked_tokens_adds_only_the_nsp_loss() -> None:
    model = tiny_pretraining_model()
    batch = batch_with_labels(torch.full((2, 6), -100))
    loss, parts = pretraining_loss(model, batch)
    assert torch.isfinite(loss) and parts["mlm_loss"] == 0.0
    assert loss.item() == parts["nsp_loss"]
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_pretraining_uses_the_one_masked_lm_loss_of_the_model() -> None:
    assert pretrain_module.masked_lm_loss is model_module.masked_lm_loss


def test_training_loss_equals_the_models_own_loss() -> None:
    model = tiny_pretraining_model()
    labels = torch.full((2, 6), -100)
    labels[0, 2], labels[1, 4] = 7, 9
    batch = batch_with_labels(labels)
    loss, parts = pretraining_loss(model.eval(), batch)
    expected = model(**batch)["loss"]
    torch.testing.assert_close(loss, expected)
    assert parts["mlm_loss"] > 0.0


def test_fill_mask_training_loss_is_zero_and_differentiable_without_masks() -> None:
    model = BertForMaskedLM(tiny_pretraining_model().config)
    batch = batch_with_labels(torch.full((2, 6), -100))
    loss, _ = masked_lm_training_loss(model, batch)
    assert torch.isfinite(loss) and loss.item() == 0.0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
