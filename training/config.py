"""The BERT configuration: the fields of a Hugging Face BERT config.json that our model reads, and the conversion
to and from that file's dict (unknown keys ignored, id2label keys as strings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import torch
import torch.nn.functional as F

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
