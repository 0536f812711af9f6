"""Our BERT against transformers' (the oracle): same outputs, same losses, same init scheme, same config.json."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from contract.tasks import TASKS
from tests.training.conftest import TINY_BERT_CONFIG, max_abs_difference
from training.checkpoint import load_model
from training.losses import masked_lm_loss
from training.model import ARCHITECTURES, BertConfig, BertForMaskedLM, BertForPreTraining

PARITY_TOLERANCE = 1e-5
SaveHfBert = Callable[..., tuple[nn.Module, Path]]

# architecture -> (config overrides, output names to compare)
PARITY_CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "BertModel": ({}, ["last_hidden_state", "pooler_output"]),
    "BertForMaskedLM": ({}, ["logits"]),
    "BertForPreTraining": ({}, ["prediction_logits", "seq_relationship_logits"]),
    "BertForSequenceClassification": ({"num_labels": 3}, ["logits"]),
    "BertForQuestionAnswering": ({}, ["start_logits", "end_logits"]),
    "BertForTokenClassification": ({"num_labels": 5}, ["logits"]),
}


@pytest.mark.parametrize("architecture", list(PARITY_CASES))
def test_outputs_match_transformers_on_padded_batch(
    architecture: str, save_hf_bert: SaveHfBert, padded_batch: dict[str, torch.Tensor]
) -> None:
    overrides, output_names = PARITY_CASES[architecture]
    reference, folder = save_hf_bert(architecture, **overrides)
    ours = load_model(folder)

    assert type(ours).__name__ == architecture
    assert not ours.training
    with torch.no_grad():
        expected = reference(**padded_batch)
        actual = ours(**padded_batch)
    assert set(output_names) <= set(actual)
    for name in output_names:
        assert max_abs_difference(expected[name], actual[name]) <= PARITY_TOLERANCE, name


def test_state_dict_keys_equal_transformers_keys(save_hf_bert: SaveHfBert) -> None:
    for index, (architecture, (overrides, _)) in enumerate(PARITY_CASES.items()):
        reference, _ = save_hf_bert(architecture, subfolder=f"keys{index}", **overrides)
        ours = ARCHITECTURES[architecture](BertConfig.from_dict(reference.config.to_dict()))
        assert set(ours.state_dict()) == set(reference.state_dict()), architecture


def sequence_labels(problem_type: str | None, batch_size: int, num_labels: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    if problem_type == "regression":
        return torch.randn(batch_size, num_labels, generator=generator).squeeze(-1)
    if problem_type == "multi_label_classification":
        return torch.randint(0, 2, (batch_size, num_labels), generator=generator).float()
    return torch.randint(0, num_labels, (batch_size,), generator=generator)


@pytest.mark.parametrize(
    ("problem_type", "num_labels", "labels_kind"),
    [
        ("single_label_classification", 3, "single_label_classification"),
        ("multi_label_classification", 3, "multi_label_classification"),
        ("regression", 1, "regression"),
        ("regression", 2, "regression"),
        (None, 1, "regression"),
        (None, 3, "single_label_classification"),
        (None, 3, "multi_label_classification"),
    ],
)
def test_sequence_classification_loss_matches_transformers(
    problem_type: str | None,
    num_labels: int,
    labels_kind: str,
    save_hf_bert: SaveHfBert,
    padded_batch: dict[str, torch.Tensor],
) -> None:
    reference, folder = save_hf_bert("BertForSequenceClassification", num_labels=num_labels, problem_type=problem_type)
    ours = load_model(folder)
    labels = sequence_labels(labels_kind, padded_batch["input_ids"].size(0), num_labels)
    with torch.no_grad():
        expected = reference(**padded_batch, labels=labels).loss
        actual = ours(**padded_batch, labels=labels)["loss"]
    assert abs(expected.item() - actual.item()) <= PARITY_TOLERANCE


def test_head_losses_match_transformers(save_hf_bert: SaveHfBert, padded_batch: dict[str, torch.Tensor]) -> None:
    generator = torch.Generator().manual_seed(3)
    input_ids = padded_batch["input_ids"]
    token_labels = torch.randint(0, TINY_BERT_CONFIG["vocab_size"], input_ids.shape, generator=generator)
    token_labels[torch.rand(input_ids.shape, generator=generator) < 0.6] = -100
    tag_labels = torch.randint(0, 5, input_ids.shape, generator=generator).masked_fill(
        padded_batch["attention_mask"] == 0, -100
    )
    cases: list[tuple[str, dict[str, Any], dict[str, torch.Tensor]]] = [
        ("BertForMaskedLM", {}, {"labels": token_labels}),
        (
            "BertForPreTraining",
            {},
            {"labels": token_labels, "next_sentence_label": torch.tensor([0, 1, 1])},
        ),
        ("BertForTokenClassification", {"num_labels": 5}, {"labels": tag_labels}),
        # 99 lies beyond the sequence (a window without the answer): both implementations ignore it.
        (
            "BertForQuestionAnswering",
            {},
            {"start_positions": torch.tensor([1, 4, 99]), "end_positions": torch.tensor([3, 6, 99])},
        ),
    ]
    for index, (architecture, overrides, labels) in enumerate(cases):
        reference, folder = save_hf_bert(architecture, subfolder=f"loss{index}", **overrides)
        ours = load_model(folder)
        with torch.no_grad():
            expected = reference(**padded_batch, **labels).loss
            actual = ours(**padded_batch, **labels)["loss"]
        assert abs(expected.item() - actual.item()) <= PARITY_TOLERANCE, architecture


def test_fresh_weights_follow_the_transformers_init_scheme() -> None:
    config = BertConfig(**{**TINY_BERT_CONFIG, "hidden_size": 64, "intermediate_size": 128, "initializer_range": 0.05})
    torch.manual_seed(0)
    model = BertForMaskedLM(config)
    layer = model.bert.encoder.layer[0]
    for weight in (
        layer.attention.self.query.weight,
        layer.intermediate.dense.weight,
        model.bert.embeddings.word_embeddings.weight[1:],
    ):
        assert abs(weight.std().item() - config.initializer_range) < 0.1 * config.initializer_range
        assert abs(weight.mean().item()) < 0.1 * config.initializer_range
    assert torch.count_nonzero(model.bert.embeddings.word_embeddings.weight[config.pad_token_id]) == 0
    for name, parameter in model.named_parameters():
        if name.endswith("LayerNorm.weight"):
            assert torch.all(parameter == 1), name
        elif name.endswith("bias"):
            assert torch.count_nonzero(parameter) == 0, name
    decoder = model.cls.predictions.decoder
    assert decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert decoder.bias is model.cls.predictions.bias


def test_tied_decoder_trains_the_word_embeddings(padded_batch: dict[str, torch.Tensor]) -> None:
    model = BertForMaskedLM(BertConfig(**TINY_BERT_CONFIG)).train()
    labels = padded_batch["input_ids"].masked_fill(padded_batch["attention_mask"] == 0, -100)
    before = model.bert.embeddings.word_embeddings.weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    first_loss = model(**padded_batch, labels=labels)["loss"]
    first_loss.backward()
    optimizer.step()
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert not torch.equal(before, model.bert.embeddings.word_embeddings.weight)
    with torch.no_grad():
        assert model(**padded_batch, labels=labels)["loss"] < first_loss


def test_dropout_is_active_in_training_mode_only(padded_batch: dict[str, torch.Tensor]) -> None:
    model = ARCHITECTURES["BertModel"](BertConfig(**TINY_BERT_CONFIG))
    torch.manual_seed(0)
    with torch.no_grad():
        model.train()
        first, second = (model(**padded_batch)["last_hidden_state"] for _ in range(2))
        model.eval()
        third, fourth = (model(**padded_batch)["last_hidden_state"] for _ in range(2))
    assert not torch.equal(first, second)
    assert torch.equal(third, fourth)


def test_config_round_trips_through_transformers_config() -> None:
    import transformers

    ours = BertConfig(
        **TINY_BERT_CONFIG,
        id2label={0: "negative", 1: "neutral", 2: "positive"},
        problem_type="single_label_classification",
        classifier_dropout=0.2,
        architectures=["BertForSequenceClassification"],
    )
    exported = ours.to_dict()
    reference = transformers.BertConfig.from_dict(exported)
    assert reference.model_type == exported["model_type"] == "bert"
    assert reference.num_labels == ours.num_labels == 3
    assert reference.id2label == ours.id2label
    assert reference.label2id == ours.label2id
    assert all(isinstance(key, str) for key in exported["id2label"])
    assert BertConfig.from_dict(reference.to_dict()) == ours


def test_config_overrides_and_defaults_follow_transformers() -> None:
    import transformers

    assert BertConfig().id2label == transformers.BertConfig().id2label
    base = BertConfig.from_dict({**TINY_BERT_CONFIG, "unknown_key": 1, "id2label": {"0": "a", "1": "b"}})
    resized = base.with_overrides(num_labels=4)
    assert resized.id2label == transformers.BertConfig(num_labels=4).id2label
    relabelled = base.with_overrides(id2label={0: "x", 1: "y", 2: "z"})
    assert relabelled.num_labels == 3
    assert relabelled.label2id == {"x": 0, "y": 1, "z": 2}
    with pytest.raises(ValueError, match="problem_type"):
        base.with_overrides(problem_type="ranking")


def test_every_architecture_of_the_task_table_can_be_built() -> None:
    for spec in TASKS.values():
        assert spec.architecture in ARCHITECTURES, spec.name
        assert spec.sources <= set(ARCHITECTURES), spec.name
        assert spec.detect_from <= set(ARCHITECTURES), spec.name
    assert set(ARCHITECTURES) == set(PARITY_CASES)


def test_masked_lm_loss_is_torchs_mean_cross_entropy_over_labelled_positions() -> None:
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 6, 11, generator=generator)
    labels = torch.randint(0, 11, (3, 6), generator=generator)
    labels[torch.rand(3, 6, generator=generator) < 0.5] = -100
    labels[0, 0] = 4  # at least one labelled position
    expected = F.cross_entropy(logits.view(-1, 11), labels.view(-1))  # torch's ignore_index=-100 mean
    torch.testing.assert_close(masked_lm_loss(logits, labels), expected)


def test_masked_lm_loss_without_labelled_positions_is_a_differentiable_zero() -> None:
    logits = torch.randn(2, 5, 11, requires_grad=True)
    loss = masked_lm_loss(logits, torch.full((2, 5), -100))
    assert torch.isfinite(loss) and loss.item() == 0.0
    loss.backward()
    assert logits.grad is not None and torch.equal(logits.grad, torch.zeros_like(logits))


@pytest.mark.parametrize("architecture", [BertForMaskedLM, BertForPreTraining])
def test_mlm_heads_report_a_finite_loss_for_a_batch_with_nothing_masked(
    architecture: type[nn.Module], padded_batch: dict[str, torch.Tensor]
) -> None:
    torch.manual_seed(0)
    model = architecture(BertConfig(**TINY_BERT_CONFIG))
    unmasked = torch.full_like(padded_batch["input_ids"], -100)
    outputs = model(**padded_batch, labels=unmasked)
    assert torch.isfinite(outputs["loss"]) and outputs["loss"].item() == 0.0  # no NSP label: the MLM part only
    outputs["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_pretraining_head_at_masked_positions_gives_the_full_heads_logits_loss_and_gradients(
    padded_batch: dict[str, torch.Tensor],
) -> None:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(**TINY_BERT_CONFIG)).eval()
    masked = torch.zeros_like(padded_batch["input_ids"], dtype=torch.bool)
    masked[0, [1, 4, 9]] = masked[1, 2] = masked[2, 1] = True
    labels = padded_batch["input_ids"].masked_fill(~masked, -100)
    targets = {"labels": labels, "next_sentence_label": torch.tensor([0, 1, 0])}

    full = model(**padded_batch, **targets)
    full["loss"].backward()
    full_gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    sparse = model(**padded_batch, **targets, masked_positions=masked)
    sparse["loss"].backward()

    assert sparse["prediction_logits"].shape == (5, TINY_BERT_CONFIG["vocab_size"])
    torch.testing.assert_close(sparse["prediction_logits"], full["prediction_logits"][masked])
    torch.testing.assert_close(sparse["loss"], full["loss"])
    for name, parameter in model.named_parameters():
        if name in full_gradients:
            torch.testing.assert_close(parameter.grad, full_gradients[name], msg=name)
