"""Sentence embeddings from a feature-extraction bundle: one model row per text, its ``sentence_embedding``.

Pooling (mean or [CLS]) and, when bundle.json's ``normalize`` says so, L2 normalisation run inside the graph, as
sentence-transformers computes them. This handler tokenizes (truncating to the model's max length unless asked not
to), prepending the prompt a request names (``prompt_name``, a key of the sentence-transformers prompts recorded
in bundle.json) or the model's default one, and shapes the vector: ``dimensions`` keeps its first N values and
re-normalises them (OpenAI's Matryoshka-style cut), ``normalize`` L2-normalises a vector the graph did not
normalise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.tasks import task_spec
from service.tasks.base import InputError, ModelContext, Prepared, one_row_per_text, require_text

DIRECTIONS = ("right", "left")


@dataclass(frozen=True, slots=True)
class EmbeddingParams:
    # None: the vector as the bundle's graph gives it (normalised when bundle.json says normalize); True: L2-normalised;
    # False: the graph's vector unchanged (a graph that normalises cannot be undone).
    normalize: bool | None = None
    truncate: bool = True  # False: a text longer than the model's max length is a client error naming its length
    truncation_direction: str = "right"  # which end of a long text is cut
    dimensions: int | None = None  # keep the first N values (then re-normalise when the result is normalised)
    prompt_name: str | None = None  # a key of the model's prompts, prepended to every text (None: the default one)


@dataclass(frozen=True, slots=True)
class TokenEmbeddingParams:
    """TEI's ``/embed_all``: every token's state (special tokens included, not normalised)."""

    truncate: bool = False
    truncation_direction: str = "right"
    prompt_name: str | None = None


@dataclass(frozen=True, slots=True)
class TokenEmbeddings:
    vectors: np.ndarray  # (tokens, hidden size) float32


@dataclass(frozen=True, slots=True)
class Embedding:
    vector: np.ndarray  # (dimensions or hidden size,) float32
    tokens: int  # tokens the model read for this text, special tokens included


def _check_params(params: EmbeddingParams) -> str:
    dimensions = params.dimensions
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise InputError(f"dimensions must be an integer >= 1, got {dimensions!r}")
    direction = params.truncation_direction.lower()
    if direction not in DIRECTIONS:
        raise InputError(f"truncation_direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    return direction


def _text(item: Any, index: int) -> str:
    """A text to embed: a string with something in it (as every other task requires)."""
    return require_text(item, f"input {index}")


def _prompt(ctx: ModelContext, name: str | None) -> str:
    """The text prepended to each input, as sentence-transformers' ``prompt_name`` prepends it."""
    if name is None:
        return ctx.default_prompt
    if name not in ctx.prompts:
        known = ", ".join(sorted(ctx.prompts))
        raise InputError(f"prompt_name {name!r} is not one of this model's prompts ({known})" if known else
                         f"prompt_name {name!r}: this model declares no prompts")  # fmt: skip
    return ctx.prompts[name]


def l2_normalized(vector: np.ndarray) -> np.ndarray:
    """``vector / ||vector||`` in float32 (norm clamped at 1e-12, as torch's normalize and sentence-transformers do)."""
    norm = float(np.linalg.norm(vector.astype(np.float64)))
    return (vector / np.float32(max(norm, 1e-12))).astype(np.float32)


class FeatureExtractionHandler:
    task: str = "feature-extraction"
    output_names: tuple[str, ...] = task_spec("feature-extraction").outputs

    def prepare(
        self, ctx: ModelContext, inputs: list[Any], params: EmbeddingParams | TokenEmbeddingParams
    ) -> list[Prepared]:
        if isinstance(params, TokenEmbeddingParams):
            if not ctx.token_embeddings:
                raise InputError("this model was exported without token embeddings (export it with --token-embeddings)")
            params = EmbeddingParams(None, params.truncate, params.truncation_direction, None, params.prompt_name)
        direction = _check_params(params)
        prompt = _prompt(ctx, params.prompt_name)
        texts = [prompt + _text(item, index) for index, item in enumerate(inputs)]
        return one_row_per_text(ctx, texts, params.truncate, direction)

    def postprocess(
        self,
        ctx: ModelContext,
        prepared: Prepared,
        outputs: list[dict[str, np.ndarray]],
        params: EmbeddingParams | TokenEmbeddingParams,
    ) -> Embedding | TokenEmbeddings:
        if isinstance(params, TokenEmbeddingParams):
            tokens = len(prepared.sequences[0])
            return TokenEmbeddings(np.asarray(outputs[0]["token_embeddings"][:tokens], dtype=np.float32))
        vector = np.asarray(outputs[0]["sentence_embedding"], dtype=np.float32)
        size = int(vector.shape[-1])
        cut = params.dimensions is not None and params.dimensions < size
        if params.dimensions is not None:
            if params.dimensions > size:
                raise InputError(f"dimensions {params.dimensions} is more than the model's {size}")
            vector = vector[: params.dimensions]
        normalized = ctx.embedding_normalized if params.normalize is None else params.normalize
        if normalized and (cut or not ctx.embedding_normalized):
            vector = l2_normalized(vector)
        return Embedding(vector=vector, tokens=len(prepared.sequences[0]))
