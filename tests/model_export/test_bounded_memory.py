"""The export in bounded memory writes what the in-memory tools write, drops torch first and logs its peak RSS.

Each step reads and writes its weights a tensor at a time (external data between steps, the bundle's single file
streamed at the end). The reference for every file is the tool run the way the export ran it before: the exporter
with its weights inside, onnxruntime's ``optimize_model`` and ``quantize_dynamic`` on self-contained files, each
saved by ``onnx.save_model``. The files must be the same byte for byte.
"""

from __future__ import annotations

import gc
import logging
import re
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.optimizer import optimize_model

from contract.bundle import read_bundle
from contract.tasks import INPUT_NAMES, TASKS
from model_export import export as export_module
from model_export import memory, onnx_files
from model_export.export import export_bundle
from model_export.memory import MB, peak_rss_bytes
from model_export.onnx_files import save_single_file
from model_export.optimize import INT8_OPS, optimize_bert, quantize_int8
from model_export.torch_export import OnnxAdapter, SentenceEmbedder, export_onnx, fp32_weights_bytes
from model_export.validate import ExportError
from tests.model_export.conftest import TINY

EXPORTED_TASKS = (
    "text-classification", "token-classification", "question-answering", "fill-mask", "feature-extraction"
)  # fmt: skip
SHAPE = (TINY["num_attention_heads"], TINY["hidden_size"], TINY["num_hidden_layers"])


def adapter_for(checkpoint: Path, task: str) -> OnnxAdapter:
    from training.checkpoint import load_model

    model: torch.nn.Module = load_model(checkpoint, TASKS[task].architecture)
    if task == "feature-extraction":
        model = SentenceEmbedder(model, "mean", normalize=True)
    return OnnxAdapter(model, TASKS[task].outputs).eval()


def export_in_memory(adapter: OnnxAdapter, path: Path, task: str) -> None:
    """torch.onnx.export as the export called it before: the weights inside the one file."""
    dummy_ids = torch.full((2, 8), 5, dtype=torch.long)
    dummy_mask = torch.ones_like(dummy_ids)
    dummy_mask[1, 6:] = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            adapter, (dummy_ids, dummy_mask, torch.zeros_like(dummy_ids)), str(path), input_names=list(INPUT_NAMES),
            output_names=list(adapter.output_names), dynamic_axes=TASKS[task].dynamic_axes(), opset_version=17,
            do_constant_folding=True, dynamo=False,
        )  # fmt: skip
    adapter.eval()


def quantize_in_memory(source: Path, target: Path) -> None:
    """quantize_dynamic on a self-contained file, with the export's options."""
    quantize_dynamic(
        str(source), str(target), per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=list(INT8_OPS),
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )  # fmt: skip


def single_file(path: Path, target: Path) -> bytes:
    """A graph with external data as the one self-contained file the bundle gets."""
    save_single_file(onnx.load(str(path), load_external_data=False), target, base_dir=path.parent)
    return target.read_bytes()


@pytest.fixture(scope="module", params=EXPORTED_TASKS)
def graphs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, checkpoint) -> Path:
    """One task's graphs made both ways: bounded (external data between steps) and in memory (the old way)."""
    task = request.param
    folder = tmp_path_factory.mktemp(task)
    adapter = adapter_for(checkpoint("ours", task), task)
    export_onnx(adapter, folder / "raw.onnx", task, opset=17)
    export_in_memory(adapter, folder / "raw-reference.onnx", task)
    optimize_bert(folder / "raw.onnx", folder / "fused.onnx", *SHAPE)
    reference = optimize_model(str(folder / "raw-reference.onnx"), "bert", SHAPE[0], SHAPE[1])
    onnx.save_model(reference.model, str(folder / "fused-reference.onnx"))
    quantize_int8(folder / "fused.onnx", folder / "int8.onnx")
    quantize_in_memory(folder / "fused-reference.onnx", folder / "int8-reference.onnx")
    return folder


def test_the_exported_graph_keeps_its_weights_beside_it_and_is_the_exporters_own(graphs: Path) -> None:
    folder = graphs
    assert (folder / "raw.onnx.data").stat().st_size > 0
    assert (folder / "raw.onnx").stat().st_size < (folder / "raw-reference.onnx").stat().st_size / 2
    assert single_file(folder / "raw.onnx", folder / "raw-single.onnx") == (folder / "raw-reference.onnx").read_bytes()


def test_the_fused_graph_is_what_optimize_model_writes(graphs: Path) -> None:
    folder = graphs
    assert (folder / "fused.onnx.data").exists()
    fused = single_file(folder / "fused.onnx", folder / "fused-single.onnx")
    assert fused == (folder / "fused-reference.onnx").read_bytes()
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]  # scratch folders are gone


def test_the_int8_graph_is_what_quantize_dynamic_writes(graphs: Path) -> None:
    folder = graphs
    assert (folder / "int8.onnx").read_bytes() == (folder / "int8-reference.onnx").read_bytes()
    assert not (folder / "int8.onnx.data").exists()
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]


def test_int8_of_the_unfused_graph_is_what_quantize_dynamic_writes(graphs: Path, tmp_path: Path) -> None:
    """--no-optimize --quantize int8 quantises the exported graph itself, external data and all."""
    quantize_int8(graphs / "raw.onnx", tmp_path / "int8.onnx")
    quantize_in_memory(graphs / "raw-reference.onnx", tmp_path / "int8-reference.onnx")
    assert (tmp_path / "int8.onnx").read_bytes() == (tmp_path / "int8-reference.onnx").read_bytes()


def test_a_single_file_over_protobufs_limit_is_refused_and_not_left_behind(
    graphs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onnx_files, "MAX_SINGLE_FILE_BYTES", 10_000)
    with pytest.raises(ExportError, match="over 2 GiB"):
        single_file(graphs / "raw.onnx", tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_the_torch_model_is_gone_before_the_first_onnx_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: Callable[[str, str], Path]
) -> None:
    models: list[weakref.ref[torch.nn.Module]] = []
    alive_at_onnx_steps: list[bool] = []
    load_model, check_parity, optimize = export_module.load_for_export, export_module.check_parity, optimize_bert

    def loading(*args, **kwargs):  # type: ignore[no-untyped-def]
        model = load_model(*args, **kwargs)
        models.append(weakref.ref(model))
        return model

    def checking(*args, **kwargs):  # type: ignore[no-untyped-def]
        alive_at_onnx_steps.append(models[0]() is not None)
        return check_parity(*args, **kwargs)

    def optimizing(*args, **kwargs):  # type: ignore[no-untyped-def]
        alive_at_onnx_steps.append(models[0]() is not None)
        return optimize(*args, **kwargs)

    monkeypatch.setattr(export_module, "load_for_export", loading)
    monkeypatch.setattr(export_module, "check_parity", checking)
    monkeypatch.setattr(export_module.graph_rewrites, "optimize_bert", optimizing)
    export_bundle(checkpoint("ours", "text-classification"), tmp_path / "out", quantize="int8")
    assert len(models) == 1
    assert alive_at_onnx_steps == [False] * 5  # raw, fused, int8 (probe and texts) checks and the fusion


def test_the_export_logs_its_peak_rss_against_the_fp32_weights(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, checkpoint: Callable[[str, str], Path]
) -> None:
    from training.checkpoint import load_model

    source = checkpoint("ours", "question-answering")
    with caplog.at_level(logging.INFO, logger="model_export"):
        bundle = export_bundle(source, tmp_path / "out")
    last = caplog.records[-1].getMessage()
    found = re.fullmatch(r"done: .+; peak RSS ([\d,]+) MB \(([\d.]+)x the ([\d.]+) MB of fp32 weights\)", last)
    assert found is not None, last
    peak_mb, ratio, weights_mb = (float(found[index].replace(",", "")) for index in (1, 2, 3))
    weights = fp32_weights_bytes(load_model(source))  # a tiny model: well under a megabyte
    assert weights_mb == round(weights / MB, 2) > 0
    assert 0 < peak_mb <= peak_rss_bytes() / MB + 1  # the process's own high-water mark when the export ended
    assert ratio == pytest.approx(peak_mb * MB / weights, rel=0.01)
    assert sorted(path.name for path in bundle.path.iterdir()) == ["bundle.json", "model.onnx", "tokenizer.json"]
    assert read_bundle(bundle.path).spec.parity["fp32"]["max_abs_diff"]


class Cycle:
    """An object that only the garbage collector frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


def test_within_an_export_a_collection_frees_what_was_made_inside_and_leaves_the_older_heap_alone() -> None:
    gc.disable()  # no automatic collection frees the older cycle before the freeze
    try:
        before = Cycle()
        old = weakref.ref(before)
        del before
        with memory.collecting_new_objects_only():
            assert gc.get_freeze_count() > 0
            inside = Cycle()
            new = weakref.ref(inside)
            del inside
            with memory.collecting_new_objects_only():  # nested: still frozen once
                memory.release_memory()
            assert gc.get_freeze_count() > 0  # the inner exit left the heap frozen
            assert new() is None
            assert old() is not None  # made before: not scanned
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert old() is None  # back in the collector's generations, and freed there
    finally:
        gc.enable()


def test_a_heap_the_process_froze_itself_stays_frozen_after_an_export() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with memory.collecting_new_objects_only():
            Cycle()
            memory.release_memory()
        assert gc.get_freeze_count() >= frozen - 100  # not unfrozen (a few frozen objects may die by refcount)
    finally:
        gc.unfreeze()
