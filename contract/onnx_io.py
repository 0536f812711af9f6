"""The mechanics every onnxruntime caller shares: padding rows into the graph's inputs, opening a session.

Torch-free and FastAPI-free: export validation, the service's worker and the benchmarks' raw loop use these,
so the three feed the graph the same way (pad id from the tokenizer, attention mask over the real tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from contract.tasks import INPUT_NAMES

if TYPE_CHECKING:
    import onnxruntime as ort

InputFeeds = dict[str, np.ndarray]  # INPUT_NAMES -> (B, T) int64


class TokenRow(Protocol):
    """One unpadded model row: anything with ``input_ids`` and ``token_type_ids`` attributes."""

    @property
    def input_ids(self) -> Sequence[int] | np.ndarray: ...

    @property
    def token_type_ids(self) -> Sequence[int] | np.ndarray: ...


@dataclass(frozen=True, slots=True)
class PaddedRows:
    feeds: InputFeeds  # input_ids / attention_mask / token_type_ids, each (B, T) int64
    lengths: list[int]  # real tokens per row

    @property
    def input_ids(self) -> np.ndarray:
        return self.feeds["input_ids"]

    @property
    def attention_mask(self) -> np.ndarray:
        return self.feeds["attention_mask"]

    @property
    def token_type_ids(self) -> np.ndarray:
        return self.feeds["token_type_ids"]


def pad_rows(
    rows: Sequence[tuple[Sequence[int] | np.ndarray, Sequence[int] | np.ndarray]],
    pad_token_id: int,
    use_token_types: bool = True,
) -> PaddedRows:
    """(input_ids, token_type_ids) rows -> right-padded (B, T) feeds; T is the longest row.

    Padding positions hold ``pad_token_id`` with attention 0 and segment 0. ``use_token_types=False``
    zeroes the segments (a model with one token type).
    """
    lengths = [len(ids) for ids, _ in rows]
    longest = max(lengths, default=0)
    input_ids = np.full((len(rows), longest), pad_token_id, dtype=np.int64)
    attention_mask = np.zeros((len(rows), longest), dtype=np.int64)
    token_type_ids = np.zeros((len(rows), longest), dtype=np.int64)
    for row, ((ids, types), length) in enumerate(zip(rows, lengths, strict=True)):
        input_ids[row, :length] = ids
        attention_mask[row, :length] = 1
        if use_token_types:
            token_type_ids[row, :length] = types
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
    return PaddedRows({name: feeds[name] for name in INPUT_NAMES}, lengths)


def pad_token_rows(rows: Sequence[TokenRow], pad_token_id: int, use_token_types: bool = True) -> PaddedRows:
    """``pad_rows`` for objects carrying ``input_ids`` / ``token_type_ids`` (the service's model rows)."""
    return pad_rows([(row.input_ids, row.token_type_ids) for row in rows], pad_token_id, use_token_types)


def token_id(tokenizer: object, token: str) -> int:
    """The id of a special token in a tokenizers Tokenizer; ValueError when the vocabulary lacks it."""
    found = tokenizer.token_to_id(token)  # type: ignore[attr-defined]
    if found is None:
        raise ValueError(f"the tokenizer lacks the token {token!r}")
    return int(found)


def ort_session(
    model_path: Path | str,
    threads: int | None = None,
    spin: bool = True,
    optimize: bool = True,
    providers: Sequence[str | tuple[str, dict[str, Any]]] = ("CPUExecutionProvider",),
    config: Mapping[str, str] | None = None,
) -> ort.InferenceSession:
    """An InferenceSession as every caller here opens one.

    ``threads``: intra-op threads (None: onnxruntime's choice); one inter-op thread, sequential execution.
    ``spin=False`` stops idle intra-op threads from busy-waiting (costs latency, frees the cores for others).
    ``optimize=False`` runs the graph exactly as written (no graph rewrites). ``config``: more session config
    entries (onnxruntime's ``session.*`` keys). ``providers``: names, or (name, provider options) pairs.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    if threads:
        options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for key, value in (config or {}).items():
        options.add_session_config_entry(key, value)
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    return ort.InferenceSession(str(model_path), options, providers=list(providers))


def run_session(session: ort.InferenceSession, feeds: InputFeeds) -> dict[str, np.ndarray]:
    """Every output of the graph by name, for the inputs the graph declares."""
    names = [output.name for output in session.get_outputs()]
    arrays = session.run(names, {node.name: feeds[node.name] for node in session.get_inputs()})
    return dict(zip(names, arrays, strict=True))
