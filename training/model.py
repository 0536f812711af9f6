"""BERT in plain torch, parameter for parameter the Hugging Face layout.

Module and parameter names equal the keys of a transformers BERT state dict, so an HF checkpoint folder loads 1:1
(see checkpoint.py) and what we save loads back in transformers. Attention is written out (matmul, scale, additive
mask, softmax) rather than via scaled_dot_product_attention: onnxruntime's optimizer only fuses that pattern.

Shapes: B batch, T sequence length, H hidden size, N heads, D head size (H = N * D), V vocabulary, L labels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

PROBLEM_TYPES = ("single_label_classification", "multi_label_classification", "regression")

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    initializer_range: float = 0.02
    # num_labels only seeds id2label when that is absent (as in HF); afterwards it is len(id2label).
    num_labels: int | None = None
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    classifier_dropout: float | None = None
    architectures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.id2label is None:
            self.id2label = {i: f"LABEL_{i}" for i in range(2 if self.num_labels is None else self.num_labels)}
        self.id2label = {int(i): str(label) for i, label in sorted(self.id2label.items(), key=lambda kv: int(kv[0]))}
        self.num_labels = len(self.id2label)
        if self.label2id is None or set(self.label2id) != set(self.id2label.values()):
            self.label2id = {label: i for i, label in self.id2label.items()}
        self.label2id = {str(label): int(i) for label, i in self.label2id.items()}
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise ValueError(f"problem_type must be one of {PROBLEM_TYPES} or None, got {self.problem_type!r}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported; known: {sorted(ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BertConfig:
        """Build from an HF config.json dict; keys this model has no use for are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})

    def with_overrides(self, **overrides: Any) -> BertConfig:
        """A copy with some fields replaced; num_labels without id2label gives fresh LABEL_i names."""
        values = self.to_dict()
        if "num_labels" in overrides and "id2label" not in overrides:
            values.pop("id2label")
            values.pop("label2id")
        if "id2label" in overrides and "label2id" not in overrides:
            values.pop("label2id")
        values.update(overrides)
        return BertConfig.from_dict(values)

    def to_dict(self) -> dict[str, Any]:
        """HF-compatible config.json content (JSON object keys are strings, hence id2label's str keys)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        assert self.id2label is not None
        values["id2label"] = {str(i): label for i, label in self.id2label.items()}
        values["architectures"] = list(self.architectures)
        return {"model_type": "bert", "position_embedding_type": "absolute", **values}


class BertEmbeddings(nn.Module):
    position_ids: torch.Tensor

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # Slicing a buffer (instead of torch.arange) keeps the sequence axis dynamic in a traced ONNX export.
        self.register_buffer(
            "position_ids", torch.arange(config.max_position_embeddings).unsqueeze(0), persistent=False
        )

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        position_ids = self.position_ids[:, : input_ids.size(1)]  # (1, T)
        embeddings = (
            self.word_embeddings(input_ids)
            + self.token_type_embeddings(token_type_ids)
            + self.position_embeddings(position_ids)
        )  # (B, T, H)
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_size).transpose(1, 2)  # (B, N, T, D)

    def forward(self, hidden: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        query = self.split_heads(self.query(hidden))
        key = self.split_heads(self.key(hidden))
        value = self.split_heads(self.value(hidden))
        scores = torch.matmul(query, key.transpose(-1, -2))  # (B, N, T, T)
        scores = scores / math.sqrt(self.head_size)
        scores = scores + additive_mask  # additive_mask (B, 1, 1, T) broadcasts over heads and query positions
        probs = self.dropout(F.softmax(scores, dim=-1))
        context = torch.matmul(probs, value)  # (B, N, T, D)
        context = context.permute(0, 2, 1, 3).contiguous()  # (B, T, N, D)
        return context.view(context.size(0), context.size(1), -1)  # (B, T, H)


class BertOutput(nn.Module):
    """Project back to H, add the residual, LayerNorm: after attention (in_size H) and after the FFN (in_size I)."""

    def __init__(self, config: BertConfig, in_size: int):
        super().__init__()
        self.dense = nn.Linear(in_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)  # (B, T, H)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertOutput(config, config.hidden_size)

    def forward(self, hidden: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden, additive_mask), hidden)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = ACTIVATIONS[config.hidden_act]

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden))  # (B, T, intermediate_size)


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config, config.intermediate_size)

    def forward(self, hidden: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, additive_mask)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            hidden = layer(hidden, additive_mask)
        return hidden


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H) from the [CLS] position


class BertPreTrainedModule(nn.Module):
    """Common base: keeps the config, initialises weights like HF and ties the MLM decoder to the embeddings."""

    config: BertConfig

    def init_weights(self) -> None:
        self.apply(self._init_module)
        self.tie_weights()

    def _init_module(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, BertLMPredictionHead):
            nn.init.zeros_(module.bias)

    def tie_weights(self) -> None:
        """No-op for models without an MLM decoder."""


def extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, T) 1 = attend, 0 = padding -> (B, 1, 1, T) additive mask: 0 where attended, finfo.min where padded."""
    mask = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - mask) * torch.finfo(dtype).min


class BertModel(BertPreTrainedModule):
    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids)  # (B, T, H)
        hidden = self.encoder(hidden, extended_attention_mask(attention_mask, hidden.dtype))
        outputs = {"last_hidden_state": hidden}
        if self.pooler is not None:
            outputs["pooler_output"] = self.pooler(hidden)
        return outputs


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(hidden)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        # decoder.weight is tied to the word embeddings by the owning model; decoder.bias *is* self.bias, as in HF,
        # so the state dict carries the same keys as a transformers model.
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden))  # (B, T, V)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def masked_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits (B, T, V), labels (B, T) -> mean cross entropy over the positions whose label is not -100.

    A batch with no such position (a few short lines can draw no [MASK] at all) gives 0, not the NaN of a plain
    mean over nothing, and that 0 still backpropagates (zero gradients). Computed in float32 under autocast too.
    """
    total = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), reduction="sum")
    return total / labels.ne(-100).sum().clamp(min=1)


class TiedMaskedLMModule(BertPreTrainedModule):
    """A model with an MLM head (``self.cls.predictions``) whose decoder shares the word embeddings."""

    def tie_weights(self) -> None:
        owner: Any = self  # subclasses define .bert and .cls in __init__
        predictions = owner.cls.predictions
        predictions.decoder.weight = owner.bert.embeddings.word_embeddings.weight
        predictions.decoder.bias = predictions.bias


class BertForPreTraining(TiedMaskedLMModule):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        encoded = self.bert(input_ids, attention_mask, token_type_ids)
        outputs = {
            "prediction_logits": self.cls.predictions(encoded["last_hidden_state"]),  # (B, T, V)
            "seq_relationship_logits": self.cls.seq_relationship(encoded["pooler_output"]),  # (B, 2)
        }
        # HF only reports a loss when both label kinds are given; either one alone is still useful for training.
        losses = []
        if labels is not None:
            losses.append(masked_lm_loss(outputs["prediction_logits"], labels))
        if next_sentence_label is not None:
            losses.append(F.cross_entropy(outputs["seq_relationship_logits"], next_sentence_label.view(-1)))
        if losses:
            outputs["loss"] = torch.stack(losses).sum()
        return outputs


class BertForMaskedLM(TiedMaskedLMModule):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.bert(input_ids, attention_mask, token_type_ids)["last_hidden_state"]
        outputs = {"logits": self.cls.predictions(hidden)}  # (B, T, V)
        if labels is not None:
            outputs["loss"] = masked_lm_loss(outputs["logits"], labels)
        return outputs


def sequence_classification_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str | None) -> torch.Tensor:
    """HF's rule: without a problem_type, one label means regression, integer labels single-label, else multi-label."""
    num_labels = logits.size(-1)
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type == "regression":
        if num_labels == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits.view(-1, num_labels), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


class BertForSequenceClassification(BertPreTrainedModule):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        assert config.num_labels is not None
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        pooled = self.bert(input_ids, attention_mask, token_type_ids)["pooler_output"]  # (B, H)
        outputs = {"logits": self.classifier(self.dropout(pooled))}  # (B, L)
        if labels is not None:
            outputs["loss"] = sequence_classification_loss(outputs["logits"], labels, self.config.problem_type)
        return outputs


class BertForQuestionAnswering(BertPreTrainedModule):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        if config.num_labels != 2:
            raise ValueError(f"question answering needs num_labels == 2 (start, end), got {config.num_labels}")
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.bert(input_ids, attention_mask, token_type_ids)["last_hidden_state"]
        start_logits, end_logits = self.qa_outputs(hidden).split(1, dim=-1)  # 2 x (B, T, 1)
        outputs = {
            "start_logits": start_logits.squeeze(-1).contiguous(),  # (B, T)
            "end_logits": end_logits.squeeze(-1).contiguous(),  # (B, T)
        }
        if start_positions is not None and end_positions is not None:
            # Positions outside the sequence (e.g. an answer cut off by a window) are ignored, as in HF.
            ignored_index = outputs["start_logits"].size(1)
            start = start_positions.view(-1).clamp(0, ignored_index)
            end = end_positions.view(-1).clamp(0, ignored_index)
            start_loss = F.cross_entropy(outputs["start_logits"], start, ignore_index=ignored_index)
            end_loss = F.cross_entropy(outputs["end_logits"], end, ignore_index=ignored_index)
            outputs["loss"] = (start_loss + end_loss) / 2
        return outputs


class BertForTokenClassification(BertPreTrainedModule):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        assert config.num_labels is not None
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.bert(input_ids, attention_mask, token_type_ids)["last_hidden_state"]
        outputs = {"logits": self.classifier(self.dropout(hidden))}  # (B, T, L)
        if labels is not None:
            outputs["loss"] = F.cross_entropy(outputs["logits"].view(-1, outputs["logits"].size(-1)), labels.view(-1))
        return outputs


ARCHITECTURES: dict[str, type[BertPreTrainedModule]] = {
    "BertModel": BertModel,
    "BertForPreTraining": BertForPreTraining,
    "BertForMaskedLM": BertForMaskedLM,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForQuestionAnswering": BertForQuestionAnswering,
    "BertForTokenClassification": BertForTokenClassification,
}
