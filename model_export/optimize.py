"""Graph rewrites of an exported BERT: operator fusion, dynamic int8 quantisation, fp16 conversion.

Every function reads one ONNX file (self-contained, or with its weights in ``NAME.data`` beside it) and writes one
self-contained file; none needs torch.

Fusion for CPU runs the two stages of onnxruntime's ``optimize_model`` for BERT itself (onnxruntime's basic graph
optimisations, then the Python fusions) so that the weights stay on disk in between: the optimizer's default path
loads the whole model into Python and its symbolic shape inference copies that model at every fusion that asks for
shapes (7x the weights for BERT-base). With the weights left in external data the fusions see the same graph; the
few weights they merge (attention's Q/K/V) are read from the data file, relative to the working directory.
"""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

from model_export.onnx_files import external_data_file, save_single_file, save_with_external_data
from model_export.validate import ExportError

logger = logging.getLogger(__name__)

ATTENTION_OPS = ("Attention", "MultiHeadAttention", "QAttention")
INT8_OPS = ("MatMul", "Attention")  # what int8 quantises: the matrix products, where the time goes
BERT_OPT_LEVEL = 1  # optimize_model's default for model_type "bert": onnxruntime's basic optimisations first
DISABLED_OPTIMIZERS = ["ConstantSharing"]  # as optimize_model disables it


def _statistics(optimized: Any, num_layers: int) -> dict[str, int]:
    """The non-zero fusion counts; ExportError (AttentionNotFused) unless Attention fused in every layer."""
    statistics = {name: int(count) for name, count in optimized.get_fused_operator_statistics().items() if count}
    fused_attention = sum(statistics.get(op, 0) for op in ATTENTION_OPS)
    if fused_attention != num_layers:
        raise AttentionNotFused(f"the optimizer fused Attention in {fused_attention} of {num_layers} layers")
    logger.info("fused operators: %s", ", ".join(f"{name} {count}" for name, count in sorted(statistics.items())))
    return statistics


def optimize_bert(source: Path, target: Path, num_heads: int, hidden_size: int, num_layers: int) -> dict[str, int]:
    """Fuse attention, layer norms and GELU with onnxruntime's BERT optimizer; returns the non-zero fusion counts.

    Raises ExportError when Attention did not fuse in every layer: our model writes attention the way the optimizer
    recognises, so a missing fusion means the exported graph is not the one we expect (and int8 would lose QAttention).
    """
    from onnxruntime.transformers.optimizer import optimize_by_fusion, optimize_by_onnxruntime

    with tempfile.TemporaryDirectory(prefix=".fuse-", dir=target.parent) as scratch_name:
        scratch = Path(scratch_name)
        basic = scratch / "basic.onnx"
        optimize_by_onnxruntime(
            str(source), use_gpu=False, optimized_model_path=str(basic), opt_level=BERT_OPT_LEVEL,
            disabled_optimizers=DISABLED_OPTIMIZERS, save_as_external_data=True,
        )  # fmt: skip
        model = onnx.load(str(basic), load_external_data=False)
        for tensor in model.graph.initializer:
            if not tensor.doc_string:  # onnxruntime marks the external tensors it writes with an empty one
                tensor.ClearField("doc_string")
        with contextlib.chdir(scratch):  # where the fusions find the external weights they read
            optimized = optimize_by_fusion(model, "bert", num_heads, hidden_size)
        statistics = _statistics(optimized, num_layers)
        save_with_external_data(optimized.model, target, base_dir=scratch)
    return statistics


class AttentionNotFused(ExportError):
    """onnxruntime's optimizer did not fuse attention in every layer of the graph."""


def _set_aside(model: onnx.ModelProto, keep_for: frozenset[str]) -> list[tuple[int, onnx.TensorProto]]:
    """Turn the external initializers that no ``keep_for`` node reads into graph inputs of the same type and shape;
    returns them with their index among the initializers, to be put back once the quantiser is done."""
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    aside = [
        (index, tensor)
        for index, tensor in enumerate(model.graph.initializer)
        if uses_external_data(tensor) and not readers.get(tensor.name, set()) & keep_for
    ]
    if not aside:
        return []
    # Copies (without data: the bytes stay in the file) that outlive the edits of the repeated field below.
    copies = [(index, onnx.TensorProto.FromString(tensor.SerializeToString())) for index, tensor in aside]
    names = {tensor.name for _, tensor in copies}
    kept = [onnx.TensorProto.FromString(t.SerializeToString()) for t in model.graph.initializer if t.name not in names]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    for _, tensor in copies:
        model.graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
    return copies


def _put_back(
    model: onnx.ModelProto, aside: list[tuple[int, onnx.TensorProto]], before: list[str], base_dir: Path
) -> None:
    """Undo ``_set_aside`` on the quantised graph: the inputs go, the initializers return with their data (loaded as
    the quantiser loads the others) where they were. The quantiser keeps the initializers it does not replace in
    their order (``before``: the names of the graph it was given) and appends the ones it makes, so each returns
    right after the last of those that preceded it."""
    names = {tensor.name for _, tensor in aside}
    inputs = [node for node in model.graph.input if node.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    order = list(model.graph.initializer)
    for index, tensor in aside:
        load_external_data_for_tensor(tensor, str(base_dir))
        preceding = set(before[:index])
        order.insert(max((at + 1 for at, current in enumerate(order) if current.name in preceding), default=0), tensor)
    del model.graph.initializer[:]
    model.graph.initializer.extend(order)


# A layer's feed-forward output projection reads the GELU's output, whose outliers per-tensor dynamic activation
# scales handle worst: in MiniLM SQuAD, keeping the first two layers' in fp32 takes int8's loss from 1.6 to 0.4 F1
# (the last layers' change nothing; benchmarks/results/int8_nodes.md).
FFN_OUTPUT = re.compile(r"layer\.(\d+)/output/dense/MatMul$")
FP32_FFN_REASON = "feed-forward output projection of an early layer: int8 costs the most accuracy there"
# In MiniLM SST-2 it is attention instead: fp32 attention keeps int8 at fp32's accuracy (90.60 against 89.79).
FP32_ATTENTION_REASON = "fused attention: int8 costs this task's accuracy there"


def kept_fp32_nodes(model_path: Path, ffn_layers: int, attention: bool) -> dict[str, str]:
    """Node name -> why it stays fp32: the first ``ffn_layers`` layers' feed-forward output projections, and the
    fused Attention nodes when ``attention``."""
    if ffn_layers <= 0 and not attention:
        return {}
    kept: dict[str, str] = {}
    for node in onnx.load(str(model_path), load_external_data=False).graph.node:
        found = FFN_OUTPUT.search(node.name)
        if node.op_type == "MatMul" and found and int(found.group(1)) < ffn_layers:
            kept[node.name] = FP32_FFN_REASON
        elif attention and node.op_type == "Attention":
            kept[node.name] = FP32_ATTENTION_REASON
    return kept


def _quantize_dynamic(source: Path, target: Path, keep_fp32: Sequence[str], reduce_range: bool) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(source),
        str(target),
        nodes_to_exclude=list(keep_fp32),
        per_channel=True,
        reduce_range=reduce_range,
        weight_type=QuantType.QInt8,
        # Only the matrix products (where the time goes); the embedding tables stay fp32: quantised lookups cost
        # fine-tuned heads accuracy (SQuAD end positions, SST-2 ~1 point) and buy no speed.
        op_types_to_quantize=list(INT8_OPS),
        # The optimizer's fused graph lacks some value types; without this the quantiser cannot type new tensors.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        use_external_data_format=False,
    )


def quantize_int8(source: Path, target: Path, keep_fp32: Sequence[str] = (), reduce_range: bool = False) -> None:
    """Dynamic int8 with per-channel weights (per-tensor loses too much on real MiniLM, see NOTES.md).

    onnxruntime's quantiser holds about three copies of the graph it is given (its own load, a deep copy for shape
    inference, the reloaded copy). When ``source`` keeps its weights in external data, the ones no quantised node
    reads (the embedding tables, norms and biases, which stay fp32) are handed to it as graph inputs instead and put
    back into the quantised graph from the data file: the quantiser copies only the weights it quantises, and the
    file is byte for byte the one it writes from the whole model (tests/model_export/test_bounded_memory.py).
    ``keep_fp32``: names of nodes the quantiser leaves in fp32; ``reduce_range``: 7-bit weights (no saturation on
    CPUs without VNNI).
    """
    if not external_data_file(source).exists():
        _quantize_dynamic(source, target, keep_fp32, reduce_range)
        return
    model = onnx.load(str(source), load_external_data=False)
    names = [tensor.name for tensor in model.graph.initializer]
    aside = _set_aside(model, frozenset(INT8_OPS) | {"Gemm"})  # the quantiser turns Gemm into a quantised MatMul
    with tempfile.TemporaryDirectory(prefix=".int8-", dir=target.parent) as scratch_name:
        given, quantized = source.with_name(f".{source.stem}.int8-input.onnx"), Path(scratch_name) / "int8.onnx"
        onnx.save_model(model, str(given))  # beside source: its external data is found where it was
        del model
        try:
            _quantize_dynamic(given, quantized, keep_fp32, reduce_range)
        finally:
            given.unlink(missing_ok=True)
        result = onnx.load(str(quantized))
    _put_back(result, aside, names, source.parent)
    save_single_file(result, target)


def convert_fp16(source: Path, target: Path, num_heads: int, hidden_size: int, num_layers: int) -> dict[str, int]:
    """Fuse for GPU, then fp16 weights and compute; inputs and outputs keep int64 / float32 (keep_io_types)."""
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(
        str(source), model_type="bert", num_heads=num_heads, hidden_size=hidden_size, use_gpu=True
    )
    statistics = _statistics(optimized, num_layers)
    optimized.convert_float_to_float16(keep_io_types=True)
    save_single_file(optimized.model, target)
    return statistics
