"""Graph rewrites on a raw export of a tiny model of ours: fusion checks and the (GPU-only) fp16 conversion."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from contract.tasks import TASKS
from model_export.export import OnnxAdapter, export_onnx
from model_export.optimize import ATTENTION_OPS, convert_fp16, optimize_bert
from model_export.validate import ExportError
from tests.model_export.conftest import TINY


def attention_node_count(path: Path) -> int:
    """Fused attention nodes (any of the optimizer's attention ops) in the graph's top level."""
    return sum(node.op_type in ATTENTION_OPS for node in onnx.load(str(path)).graph.node)


@pytest.fixture(scope="module")
def raw_graph(tmp_path_factory: pytest.TempPathFactory, checkpoint: Callable[[str, str], Path]) -> Path:
    from training.checkpoint import load_model

    task = "text-classification"
    adapter = OnnxAdapter(load_model(checkpoint("ours", task)), TASKS[task].outputs).eval()
    path = tmp_path_factory.mktemp("raw") / "raw.onnx"
    export_onnx(adapter, path, task, opset=17)
    return path


def test_optimizer_refuses_a_graph_where_attention_did_not_fuse_everywhere(raw_graph: Path, tmp_path: Path) -> None:
    layers = TINY["num_hidden_layers"]
    with pytest.raises(ExportError, match=f"fused Attention in {layers} of {layers + 1} layers"):
        optimize_bert(raw_graph, tmp_path / "fused.onnx", TINY["num_attention_heads"], TINY["hidden_size"], layers + 1)
    assert not (tmp_path / "fused.onnx").exists()
    assert attention_node_count(raw_graph) == 0


def test_fp16_conversion_keeps_int64_inputs_and_float32_outputs(raw_graph: Path, tmp_path: Path) -> None:
    target = tmp_path / "fp16.onnx"
    statistics = convert_fp16(
        raw_graph, target, TINY["num_attention_heads"], TINY["hidden_size"], TINY["num_hidden_layers"]
    )
    assert statistics["Attention"] == TINY["num_hidden_layers"]
    model = onnx.load(str(target))
    assert {value.type.tensor_type.elem_type for value in model.graph.input} == {onnx.TensorProto.INT64}
    assert {value.type.tensor_type.elem_type for value in model.graph.output} == {onnx.TensorProto.FLOAT}
    weights = [init for init in model.graph.initializer if len(init.dims) == 2]
    assert weights and all(init.data_type == onnx.TensorProto.FLOAT16 for init in weights)
    assert attention_node_count(target) == TINY["num_hidden_layers"]
