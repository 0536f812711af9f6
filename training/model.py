"""BERT in plain torch, parameter for parameter the Hugging Face layout.

Module and parameter names equal the keys of a transformers BERT state dict, so an HF checkpoint folder loads 1:1
(see checkpoint.py) and what we save loads back in transformers. Attention is written out (matmul, scale, additive
mask, softmax) rather than via scaled_dot_product_attention: onnxruntime's optimizer only fuses that pattern.

Shapes: B batch, T sequence length, H hidden size, N heads, D head size (H = N * D), V vocabulary, L labels.
The configuration (config.json's fields) is in config.py, the heads' losses in losses.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from training.config import ACTIVATIONS, BertConfig
from training.losses import masked_lm_loss, sequence_classification_loss


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


class BertPreTrainingHeads(BertOnlyMLMHead):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


# --- task models: the encoder (self.bert) and a head ------------------------------------------------------------

Outputs = dict[str, torch.Tensor]


class BertWithHead(BertPreTrainedModule):
    """``forward`` encodes; the subclass's ``head`` turns the encoding (and any training targets: labels, start and
    end positions) into the HF outputs: logits, and a loss when targets are given. A subclass adds its head's
    modules after ``super().__init__`` and then calls ``init_weights``."""

    head: Callable[..., Outputs]

    def __init__(self, config: BertConfig, add_pooling_layer: bool):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **targets: torch.Tensor | None,
    ) -> Outputs:
        return self.head(self.bert(input_ids, attention_mask, token_type_ids), **targets)


class TiedMaskedLMModule(BertWithHead):
    """A model with an MLM head (``self.cls.predictions``) whose decoder shares the word embeddings."""

    cls: BertOnlyMLMHead

    def tie_weights(self) -> None:
        predictions = self.cls.predictions
        predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        predictions.decoder.bias = predictions.bias


class BertForPreTraining(TiedMaskedLMModule):
    cls: BertPreTrainingHeads

    def __init__(self, config: BertConfig):
        super().__init__(config, add_pooling_layer=True)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()

    def head(
        self,
        encoded: Outputs,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
    ) -> Outputs:
        # masked_positions (B, T) bool: run the vocabulary projection at those positions only, as Google's BERT
        # gathers masked_lm_positions; prediction_logits is then (N, V) for the N True positions. At 15 % masking
        # this drops most of the head's cost: a 4 x 256 step on 32 x 128 tokens takes 0.64 of the time
        # (benchmarks.studies.pretraining_step).
        hidden = encoded["last_hidden_state"]  # (B, T, H)
        outputs = {
            "prediction_logits": self.cls.predictions(hidden if masked_positions is None else hidden[masked_positions]),
            "seq_relationship_logits": self.cls.seq_relationship(encoded["pooler_output"]),  # (B, 2)
        }
        # HF only reports a loss when both label kinds are given; either one alone is still useful for training.
        losses = []
        if labels is not None:
            targets = labels if masked_positions is None else labels[masked_positions]
            losses.append(masked_lm_loss(outputs["prediction_logits"], targets))
        if next_sentence_label is not None:
            losses.append(F.cross_entropy(outputs["seq_relationship_logits"], next_sentence_label.view(-1)))
        if losses:
            outputs["loss"] = torch.stack(losses).sum()
        return outputs


class BertForMaskedLM(TiedMaskedLMModule):
    def __init__(self, config: BertConfig):
        super().__init__(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.init_weights()

    def head(self, encoded: Outputs, labels: torch.Tensor | None = None) -> Outputs:
        outputs = {"logits": self.cls.predictions(encoded["last_hidden_state"])}  # (B, T, V)
        if labels is not None:
            outputs["loss"] = masked_lm_loss(outputs["logits"], labels)
        return outputs


class LinearClassifierModule(BertWithHead):
    """Dropout and one linear layer to num_labels: over the pooled [CLS] output (sequence classification) or over
    every token (token classification, ``per_token``)."""

    per_token: bool
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, labels) -> loss

    def __init__(self, config: BertConfig):
        super().__init__(config, add_pooling_layer=not self.per_token)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        assert config.num_labels is not None
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def head(self, encoded: Outputs, labels: torch.Tensor | None = None) -> Outputs:
        features = encoded["last_hidden_state"] if self.per_token else encoded["pooler_output"]  # (B, T, H) or (B, H)
        outputs = {"logits": self.classifier(self.dropout(features))}  # (B, T, L) or (B, L)
        if labels is not None:
            outputs["loss"] = self.loss(outputs["logits"], labels)
        return outputs


class BertForSequenceClassification(LinearClassifierModule):
    per_token = False

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return sequence_classification_loss(logits, labels, self.config.problem_type)


class BertForTokenClassification(LinearClassifierModule):
    per_token = True

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))


class BertForQuestionAnswering(BertWithHead):
    def __init__(self, config: BertConfig):
        super().__init__(config, add_pooling_layer=False)
        if config.num_labels != 2:
            raise ValueError(f"question answering needs num_labels == 2 (start, end), got {config.num_labels}")
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def head(
        self, encoded: Outputs, start_positions: torch.Tensor | None = None, end_positions: torch.Tensor | None = None
    ) -> Outputs:
        start_logits, end_logits = self.qa_outputs(encoded["last_hidden_state"]).split(1, dim=-1)  # 2 x (B, T, 1)
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


ARCHITECTURES: dict[str, type[BertPreTrainedModule]] = {
    "BertModel": BertModel,
    "BertForPreTraining": BertForPreTraining,
    "BertForMaskedLM": BertForMaskedLM,
    "BertForSequenceClassification": BertForSequenceClassification,
    "BertForQuestionAnswering": BertForQuestionAnswering,
    "BertForTokenClassification": BertForTokenClassification,
}
