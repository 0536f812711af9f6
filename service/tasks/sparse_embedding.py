"""SPLADE sparse embeddings from a fill-mask bundle (text-embeddings-inference's ``/embed_sparse``).

A text's vector has one weight per vocabulary entry: log(1 + ReLU(MLM logit)), max-pooled over the text's tokens
(special tokens included, padding excluded), as sentence-transformers' ``SpladePooling`` computes it. Only the
non-zero weights are returned, by vocabulary index. The fill-mask handler runs this when its params are
``SparseEmbeddingParams``: the graph and its logits are fill-mask's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from service.tasks import base
from service.tasks.base import ModelContext, Prepared


@dataclass(frozen=True, slots=True)
class SparseEmbeddingParams:
    truncate: bool = False  # False: a text longer than the model's max length is a client error naming its length
    truncation_direction: str = "right"


@dataclass(frozen=True, slots=True)
class SparseEmbedding:
    indices: np.ndarray  # (nonzero,) int64, ascending vocabulary ids
    values: np.ndarray  # (nonzero,) float32, their weights (> 0)
    tokens: int  # tokens the model read, special tokens included


def prepare_sparse(ctx: ModelContext, inputs: list[Any], params: SparseEmbeddingParams) -> list[Prepared]:
    texts = [base.require_text(item, f"input {index}") for index, item in enumerate(inputs)]
    return base.one_row_per_text(ctx, texts, params.truncate, params.truncation_direction)


def sparse_vector(prepared: Prepared, outputs: list[dict[str, np.ndarray]]) -> SparseEmbedding:
    tokens = len(prepared.sequences[0])
    logits = np.asarray(outputs[0]["logits"], dtype=np.float32)[:tokens]  # (T, vocab): the real tokens only
    weights = np.log1p(np.maximum(logits, 0.0)).max(axis=0)  # (vocab,)
    indices = np.flatnonzero(weights > 0)
    return SparseEmbedding(indices=indices, values=weights[indices].astype(np.float32), tokens=tokens)
