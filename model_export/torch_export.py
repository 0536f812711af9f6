"""The torch side of the export: the module that is traced, its reference outputs, and the TorchScript export.

``export_onnx`` runs ``torch.onnx.export(..., dynamo=False)`` (opset 17, dynamic batch and sequence axes) in bounded
memory. Exporting with the weights inside, the exporter builds the whole ModelProto, serialises it into a string
and copies that into Python bytes while the model still holds its own weights: four copies at once (2 GB of RSS
for BERT-base's 438 MB). Here the graph is exported without its parameters (``export_params=False``); the tensors
the exporter would have stored (the model's parameters after constant folding, e.g. transposed Linear weights) are
taken from its ``_model_to_graph`` step as it returns them and written one by one as external data (``NAME.data``),
under the names and in the order the exporter gives its initializers. The graph is the exporter's own, node for
node (tests/model_export/test_bounded_memory.py: the same file byte for byte once made self-contained); only
where the bytes live differs. The exporter is not re-entrant (it refuses a nested export), so the hook on its
``_model_to_graph`` is in place for the one export running.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import onnx
import torch
from torch import nn

from contract.bundle import POOLINGS
from contract.tasks import INPUT_NAMES, TASKS
from model_export.onnx_files import write_with_external_data
from model_export.validate import ExportError, InputFeeds, Outputs

__all__ = ["OnnxAdapter", "SentenceEmbedder", "export_onnx", "fp32_weights_bytes", "torch_references"]

logger = logging.getLogger(__name__)


class SentenceEmbedder(nn.Module):
    """An encoder's token states -> one (B, H) ``sentence_embedding``, as sentence-transformers computes it.

    mean: the average of the real tokens' states (padding masked out, count clamped at 1e-9 as
    sentence-transformers' Pooling does); cls: the [CLS] token's state (not the pooler output). ``normalize`` divides
    by the L2 norm (``torch.nn.functional.normalize``: clamped at 1e-12, like sentence-transformers' Normalize).
    The token states themselves come out too, as ``token_embeddings`` (B, T, H): a graph lists them when asked.
    """

    def __init__(self, encoder: nn.Module, pooling: str, normalize: bool):
        super().__init__()
        if pooling not in POOLINGS:
            raise ExportError(f"unknown pooling {pooling!r} (known: {', '.join(POOLINGS)})")
        self.encoder = encoder
        self.pooling = pooling
        self.normalize = normalize

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        encoded = self.encoder(**inputs)
        attention_mask = inputs["attention_mask"]
        hidden = encoded["last_hidden_state"]  # (B, T, H)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        if self.normalize:
            pooled = nn.functional.normalize(pooled, p=2.0, dim=-1)
        return {"sentence_embedding": pooled, "token_embeddings": hidden}


class OnnxAdapter(nn.Module):
    """Positional graph inputs (``input_names``: input_ids, attention_mask[, token_type_ids]) -> the task's outputs
    as a tuple, for tracing."""

    def __init__(self, model: nn.Module, output_names: Sequence[str], input_names: Sequence[str] = INPUT_NAMES):
        super().__init__()
        self.model = model
        self.output_names = tuple(output_names)
        self.input_names = tuple(input_names)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = self.model(**dict(zip(self.input_names, inputs, strict=True)))
        return tuple(outputs[name] for name in self.output_names)


@contextmanager
def _exporter_parameters() -> Iterator[dict[str, torch.Tensor] | None]:
    """The name -> tensor map the TorchScript exporter builds its initializers from, filled during the export.

    None when this torch's exporter has no ``_model_to_graph`` step to take it from (then the export keeps its
    parameters inside the graph, as torch.onnx.export does by default).
    """
    try:
        from torch.onnx._internal.torchscript_exporter import utils as exporter
    except ImportError:
        yield None
        return
    original = getattr(exporter, "_model_to_graph", None)
    if original is None:
        yield None
        return
    captured: dict[str, torch.Tensor] = {}

    def model_to_graph(*args: Any, **kwargs: Any) -> Any:
        graph, params, outputs = original(*args, **kwargs)
        captured.update(params)
        return graph, params, outputs

    exporter._model_to_graph = model_to_graph
    try:
        yield captured
    finally:
        exporter._model_to_graph = original


def _initializers(
    model: onnx.ModelProto, parameters: dict[str, torch.Tensor]
) -> Iterator[tuple[onnx.TensorProto, memoryview]]:
    """Graph inputs that are parameters -> (TensorProto without data, its bytes), in the graph's order as the
    exporter writes its initializers; the inputs are removed from the graph and each tensor is dropped once yielded."""
    graph = model.graph
    names = [node.name for node in graph.input if node.name not in INPUT_NAMES]
    missing = [name for name in names if name not in parameters]
    if missing:
        raise ExportError(f"the exporter left graph inputs that are not parameters: {', '.join(missing[:5])}")
    types = {node.name: node.type.tensor_type.elem_type for node in graph.input}
    kept = [node for node in graph.input if node.name in INPUT_NAMES]
    del graph.input[:]
    graph.input.extend(kept)
    for name in names:
        tensor = parameters.pop(name).detach().contiguous()
        proto = onnx.TensorProto(name=name, dims=list(tensor.shape), data_type=types[name])
        yield proto, tensor.reshape(-1).view(torch.uint8).numpy().data
        del tensor
    parameters.clear()


def export_onnx(adapter: OnnxAdapter, path: Path, task: str, opset: int) -> None:
    """TorchScript export of ``adapter`` (in eval mode) to ``path`` + ``path.data``, its weights as external data."""
    dummy_ids = torch.full((2, 8), 5, dtype=torch.long)
    dummy_mask = torch.ones_like(dummy_ids)
    dummy_mask[1, 6:] = 0
    with _exporter_parameters() as parameters, warnings.catch_warnings():
        # Tracer and deprecation warnings about the TorchScript path are expected and say nothing about the result.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        dummies = {"input_ids": dummy_ids, "attention_mask": dummy_mask, "token_type_ids": torch.zeros_like(dummy_ids)}
        torch.onnx.export(
            adapter,
            tuple(dummies[name] for name in adapter.input_names),
            str(path),
            input_names=list(adapter.input_names),
            output_names=list(adapter.output_names),
            dynamic_axes=TASKS[task].dynamic_axes(adapter.input_names, adapter.output_names),
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
            export_params=parameters is None,
        )
    # torch.onnx.export restores the adapter's own training flag (True for a fresh module) on every submodule.
    adapter.eval()
    if parameters is None:
        logger.warning("this torch's exporter does not hand over its parameters: the export holds ~4x the weights")
    else:
        model = onnx.load(str(path))
        write_with_external_data(model, _initializers(model, parameters), path)
        del model
    onnx.checker.check_model(str(path))


def fp32_weights_bytes(module: nn.Module) -> int:
    """The module's parameters and buffers as float32 (shared tensors counted once): what "the fp32 weights" means
    in the peak-memory line."""
    tensors = {id(t): t for t in (*module.parameters(), *module.buffers()) if t.is_floating_point()}
    return sum(tensor.numel() * 4 for tensor in tensors.values())


def torch_references(adapter: OnnxAdapter, batches: Sequence[InputFeeds]) -> list[Outputs]:
    references = []
    with torch.inference_mode():
        for batch in batches:
            values = adapter(*(torch.from_numpy(batch[name]) for name in adapter.input_names))
            references.append(
                {name: value.float().numpy() for name, value in zip(adapter.output_names, values, strict=True)}
            )
    return references
