"""The contract between the engine and the task handlers.

A handler turns one request's inputs into model rows (``ModelRow``; long inputs become several
windows) and turns those rows' outputs back into pipeline-shaped answers. Handlers are pure:
tokenizers + numpy, no I/O, no FastAPI, no onnxruntime. The engine batches rows from many requests
together; it hands each row's outputs back with padding removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from tokenizers import Tokenizer


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One row for the model, unpadded. Its attention mask is all ones over its length."""

    input_ids: np.ndarray  # (T,) int64
    token_type_ids: np.ndarray  # (T,) int64

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(slots=True)
class Prepared:
    """Everything one input of a request needs: its model rows and what post-processing needs."""

    sequences: list[ModelRow]
    state: Any


@dataclass(frozen=True, slots=True)
class ModelContext:
    """Per-model facts a handler needs, fixed when the model is loaded."""

    tokenizer: Tokenizer  # no padding and no truncation configured
    max_length: int
    id2label: dict[int, str]
    problem_type: str | None
    mask_token: str
    mask_token_id: int
    cls_token_id: int
    sep_token_id: int
    pad_token_id: int
    unk_token_id: int | None = None  # None: the vocabulary has no unknown token (byte-level BPE needs none)
    # tokenizer_config.json's flag (tokenizer.json lacks it): decoded strings depend on it.
    clean_up_tokenization_spaces: bool = True
    # feature-extraction: the graph L2-normalises its sentence_embedding (bundle.json's normalize).
    embedding_normalized: bool = False
    # feature-extraction: the named prompts, and the text prepended when a request names none ("" for none).
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt: str = ""
    token_embeddings: bool = False  # feature-extraction: the graph also gives its token states (TEI's /embed_all)


class InputError(ValueError):
    """A request input the handler cannot process (empty text, no mask token, ...): a client error."""


class TaskHandler(Protocol):
    task: str
    output_names: tuple[str, ...]

    def prepare(self, ctx: ModelContext, inputs: list[Any], params: Any) -> list[Prepared]:
        """Tokenize all inputs of one request (batch encoding); raise InputError for bad input."""
        ...

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: Any
    ) -> Any:
        """``outputs[i]`` belongs to ``prepared.sequences[i]``; token-level arrays are cut to its length."""
        ...
