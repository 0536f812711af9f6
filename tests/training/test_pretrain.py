from __future__ import annotations

import torch
import torch.nn.functional as F

from training.model import BertConfig, BertForPreTraining
from training.pretrain import masked_lm_loss, pretraining_loss


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
