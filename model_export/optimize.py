"""Graph rewrites of an exported BERT: operator fusion, dynamic int8 quantisation, fp16 conversion.

Every function reads one ONNX file and writes another as a single file (no external data); none needs torch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx

from model_export.validate import ExportError

logger = logging.getLogger(__name__)

ATTENTION_OPS = ("Attention", "MultiHeadAttention", "QAttention")
# Graphs beyond protobuf's 2 GiB limit need external data, which the bundle contract forbids.
MAX_SINGLE_FILE_BYTES = 2**31 - 1


def save_single_file(model: onnx.ModelProto, path: Path) -> None:
    if model.ByteSize() > MAX_SINGLE_FILE_BYTES:
        raise ExportError(f"{path.name}: the graph is over 2 GiB and cannot be stored as one file")
    onnx.save_model(model, str(path), save_as_external_data=False)


def _fuse(source: Path, num_heads: int, hidden_size: int, num_layers: int, use_gpu: bool) -> tuple[Any, dict[str, int]]:
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(
        str(source), model_type="bert", num_heads=num_heads, hidden_size=hidden_size, use_gpu=use_gpu
    )
    statistics = {name: int(count) for name, count in optimized.get_fused_operator_statistics().items() if count}
    fused_attention = sum(statistics.get(op, 0) for op in ATTENTION_OPS)
    if fused_attention != num_layers:
        raise ExportError(f"the optimizer fused Attention in {fused_attention} of {num_layers} layers")
    logger.info("fused operators: %s", ", ".join(f"{name} {count}" for name, count in sorted(statistics.items())))
    return optimized, statistics


def optimize_bert(source: Path, target: Path, num_heads: int, hidden_size: int, num_layers: int) -> dict[str, int]:
    """Fuse attention, layer norms and GELU with onnxruntime's BERT optimizer; returns the non-zero fusion counts.

    Raises ExportError when Attention did not fuse in every layer: our model writes attention the way the optimizer
    recognises, so a missing fusion means the exported graph is not the one we expect (and int8 would lose QAttention).
    """
    optimized, statistics = _fuse(source, num_heads, hidden_size, num_layers, use_gpu=False)
    save_single_file(optimized.model, target)
    return statistics


def quantize_int8(source: Path, target: Path) -> None:
    """Dynamic int8 with per-channel weights (per-tensor loses too much on real MiniLM, see NOTES.md)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source),
        str(target),
        per_channel=True,
        weight_type=QuantType.QInt8,
        # Only the matrix products (where the time goes); the embedding tables stay fp32: quantised lookups cost
        # fine-tuned heads accuracy (SQuAD end positions, SST-2 ~1 point) and buy no speed.
        op_types_to_quantize=["MatMul", "Attention"],
        # The optimizer's fused graph lacks some value types; without this the quantiser cannot type new tensors.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        use_external_data_format=False,
    )


def convert_fp16(source: Path, target: Path, num_heads: int, hidden_size: int, num_layers: int) -> dict[str, int]:
    """Fuse for GPU, then fp16 weights and compute; inputs and outputs keep int64 / float32 (keep_io_types)."""
    optimized, statistics = _fuse(source, num_heads, hidden_size, num_layers, use_gpu=True)
    optimized.convert_float_to_float16(keep_io_types=True)
    save_single_file(optimized.model, target)
    return statistics
