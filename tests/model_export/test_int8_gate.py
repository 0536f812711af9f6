"""The int8 gate: --eval-data scores fp32 and int8 with the task's metric, --max-loss refuses int8 over budget."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest

from contract.bundle import read_bundle
from model_export.__main__ import main
from model_export.export import ExportError, export_bundle
from model_export.int8_checks import cpu_has_vnni, explain_int8_mismatch
from model_export.task_eval import EvalDataError, EvalModel, measure_int8_loss, predict, read_eval_rows, score
from model_export.validate import ValueMismatch
from tests.model_export.conftest import WORDS, _config_values, write_vocab

QUANTIZED_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "QAttention", "DynamicQuantizeMatMul"}


WIDE = {"quantize": "int8", "int8_reduce_range": True}


def random_sentences(count: int, seed: int = 0, low: int = 3, high: int = 12) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(WORDS) for _ in range(rng.randint(low, high))] for _ in range(count)]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def op_types(model_path: Path) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load(str(model_path)).graph.node)


@pytest.fixture(scope="module")
def wide_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random classifier with larger weights (init std 0.5): its predictions vary from text to text and
    int8 flips a few of them while passing the int8 parity check. Its int8 graphs take 7-bit weights (WIDE): on a
    CPU without VNNI, 8-bit weights this large saturate (top-1 agreement 76% of the probe, under the gate's 90%)."""
    import torch
    import transformers

    folder = tmp_path_factory.mktemp("wide-classifier")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        **_config_values("text-classification"), attn_implementation="eager", initializer_range=0.5
    )
    transformers.BertForSequenceClassification(config).eval().save_pretrained(folder)
    transformers.BertTokenizer(str(write_vocab(folder)), do_lower_case=True).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def classifier_eval_rows(
    wide_classifier: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[dict[str, Any]], int]:
    """Rows whose gold label is the fp32 prediction: every row int8 flips (at least one) and twice as many it keeps."""
    root = tmp_path_factory.mktemp("wide-bundles")
    fp32 = export_bundle(wide_classifier, root / "fp32")
    int8 = export_bundle(wide_classifier, root / "int8", **WIDE)
    model = EvalModel.from_bundle(fp32)
    candidates = [{"text": " ".join(words), "label": "negative"} for words in random_sentences(400)]
    fp32_labels = predict(model, fp32.model_path, candidates)
    int8_labels = predict(model, int8.model_path, candidates)
    changed = [index for index, (a, b) in enumerate(zip(fp32_labels, int8_labels, strict=True)) if a != b]
    kept = [index for index, (a, b) in enumerate(zip(fp32_labels, int8_labels, strict=True)) if a == b]
    assert changed, "int8 changed no prediction of the classifier on 400 texts: the gate test needs one"
    chosen = sorted(changed + kept[: 2 * len(changed)])
    return [{**candidates[index], "label": fp32_labels[index]} for index in chosen], len(changed)


def test_max_loss_zero_refuses_an_int8_graph_that_changes_a_prediction(
    wide_classifier: Path, classifier_eval_rows: tuple[list[dict[str, Any]], int], tmp_path: Path
) -> None:
    rows, changed = classifier_eval_rows
    data = write_jsonl(tmp_path / "eval.jsonl", rows)
    out = tmp_path / "gated"
    argv = [str(wide_classifier), str(out), "--quantize", "int8", "--int8-reduce-range", "--eval-data", str(data)]
    argv += ["--max-loss", "0", "-q"]
    assert main(argv) == 0
    spec = json.loads((out / "bundle.json").read_text())
    figures = spec["quantization_eval"]
    assert spec["quantization"] == "none" and "int8" not in spec["parity"]
    assert not QUANTIZED_OPS & set(op_types(out / "model.onnx"))
    assert figures["metric"] == "accuracy" and figures["rows"] == len(rows)
    assert figures["fp32"] == 100.0
    assert figures["changed_predictions"] == changed
    assert figures["int8"] == pytest.approx(100.0 * (len(rows) - changed) / len(rows), abs=1e-3)
    assert figures["loss"] > 0 and figures["max_loss"] == 0 and figures["int8_accepted"] is False
    assert len(figures["data_sha256"]) == 64
    assert read_bundle(out).spec.quantization_eval == figures


def test_int8_within_budget_is_written_with_its_figures(
    wide_classifier: Path, classifier_eval_rows: tuple[list[dict[str, Any]], int], tmp_path: Path
) -> None:
    rows, changed = classifier_eval_rows
    data = write_jsonl(tmp_path / "eval.jsonl", rows)
    written = export_bundle(
        wide_classifier, tmp_path / "kept", **WIDE, eval_data=data,
        max_loss=100.0,
    )  # fmt: skip
    figures = written.spec.quantization_eval
    assert written.spec.quantization == "int8" and "int8" in written.spec.parity
    assert QUANTIZED_OPS & set(op_types(written.model_path))
    assert figures["int8_accepted"] is True and figures["max_loss"] == 100.0
    assert figures["changed_predictions"] == changed and figures["loss"] > 0


@pytest.mark.parametrize("task", ["token-classification", "question-answering", "fill-mask"])
def test_gold_taken_from_the_fp32_graph_scores_100_and_loses_nothing(task: str, bundle: Callable[..., Path]) -> None:
    fp32 = read_bundle(bundle("transformers", task))
    model = EvalModel.from_bundle(fp32)
    sentences = random_sentences(24, seed=1)
    if task == "token-classification":
        rows: list[dict[str, Any]] = [{"words": words, "tags": ["O"] * len(words)} for words in sentences]
    elif task == "question-answering":
        rows = [{"question": " ".join(words[:3]), "context": " ".join(words), "answers": ["x"]} for words in sentences]
    else:
        rows = [{"text": " ".join(["[MASK]", *words]), "target": "the"} for words in sentences]
    predicted = predict(model, fp32.model_path, rows)
    gold_field = {"token-classification": "tags", "question-answering": "answers", "fill-mask": "target"}[task]
    gold_rows = [
        {**row, gold_field: [answer] if task == "question-answering" else answer}
        for row, answer in zip(rows, predicted, strict=True)
    ]
    if task == "token-classification":
        assert any(tag != "O" for tags in predicted for tag in tags), "the random model predicted no entity"
    assert score(task, gold_rows, predicted) == pytest.approx(100.0)
    figures = measure_int8_loss(model, fp32.model_path, fp32.model_path, gold_rows, max_loss=0.0)
    assert figures["fp32"] == figures["int8"] == pytest.approx(100.0)
    assert figures["loss"] == 0 and figures["changed_predictions"] == 0 and figures["int8_accepted"] is True


@pytest.mark.parametrize(
    ("task", "row", "problem"),
    [
        ("text-classification", {"text": "good"}, "'label' as a string"),
        ("text-classification", {"text": "good", "label": "great"}, "not one of the model's labels"),
        ("token-classification", {"words": ["a", "b"], "tags": ["O"]}, "2 words but 1 tags"),
        ("question-answering", {"question": "q", "context": "c", "answers": "c"}, "'answers' as a list"),
        ("feature-extraction", {"text": "good"}, "no eval metric"),
    ],
)
def test_eval_rows_that_do_not_fit_the_task_are_refused_naming_the_line(
    task: str, row: dict[str, Any], problem: str, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "eval.jsonl", [row])
    with pytest.raises(EvalDataError, match=problem):
        read_eval_rows(data, task, {0: "negative", 1: "positive"})


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"eval_data": "rows.jsonl"}, "needs --quantize int8"),
        ({"quantize": "int8", "max_loss": 0.5}, "needs --eval-data"),
        ({"quantize": "int8", "eval_data": "rows.jsonl", "max_loss": -1.0}, ">= 0"),
    ],
)
def test_gate_options_that_do_not_fit_together_fail_before_loading(
    options: dict[str, Any], problem: str, tmp_path: Path
) -> None:
    with pytest.raises(ExportError, match=problem):
        export_bundle(tmp_path / "no-checkpoint", tmp_path / "out", **options)


def test_early_feed_forward_outputs_stay_fp32_when_asked(wide_classifier: Path, tmp_path: Path) -> None:
    bundle = export_bundle(wide_classifier, tmp_path / "int8", **WIDE, int8_fp32_ffn_layers=1)
    kept = bundle.spec.parity["int8"]["kept_fp32"]
    [(name, reason)] = kept.items()
    assert name.endswith("layer.0/output/dense/MatMul") and "feed-forward" in reason
    graph = onnx.load(str(bundle.model_path)).graph
    fp32_matmuls = [node.name for node in graph.node if node.op_type == "MatMul"]
    assert name in fp32_matmuls  # still a float MatMul: the quantiser left it alone
    everything = export_bundle(wide_classifier, tmp_path / "all", **WIDE)
    assert "kept_fp32" not in everything.spec.parity["int8"]
    assert name not in [node.name for node in onnx.load(str(everything.model_path)).graph.node]
    attention = export_bundle(wide_classifier, tmp_path / "attention", **WIDE, int8_fp32_attention=True)
    kept_attention = attention.spec.parity["int8"]["kept_fp32"]
    ops = op_types(attention.model_path)
    assert ops["Attention"] == len(kept_attention) > 0 and "QAttention" not in ops
    with pytest.raises(ExportError, match="int8 only"):
        export_bundle(wide_classifier, tmp_path / "fp32", int8_fp32_ffn_layers=1)


def int8_weight_range(model_path: Path) -> tuple[int, int]:
    """The lowest and highest value over the graph's int8 initializers (the quantised weights)."""
    import numpy as np
    from onnx import numpy_helper

    weights = [
        numpy_helper.to_array(tensor)
        for tensor in onnx.load(str(model_path)).graph.initializer
        if tensor.data_type == onnx.TensorProto.INT8 and tensor.dims
    ]
    assert weights, "the int8 graph has no int8 weights"
    return int(min(np.min(w) for w in weights)), int(max(np.max(w) for w in weights))


def test_reduce_range_writes_seven_bit_weights_and_says_so(wide_classifier: Path, tmp_path: Path) -> None:
    reduced = export_bundle(wide_classifier, tmp_path / "reduced", **WIDE)
    low, high = int8_weight_range(reduced.model_path)
    assert low >= -64 and high <= 64 and high - low > 100  # 7 bits used, not fewer
    assert reduced.spec.parity["int8"]["reduce_range"] is True
    with pytest.raises(ExportError, match="int8 only"):
        export_bundle(wide_classifier, tmp_path / "fp32", int8_reduce_range=True)


@pytest.mark.parametrize(
    ("flags", "reduce_range", "hinted"),
    [("fpu avx2 fma", False, True), ("fpu avx2 avx512f avx512_vnni", False, False), ("fpu avx2", True, False)],
)
def test_an_int8_mismatch_on_a_cpu_without_vnni_names_the_option(
    flags: str, reduce_range: bool, hinted: bool, tmp_path: Path
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    error = ValueMismatch("int8 graph", ["top-1 of logits agrees with torch on 76.2% of the probe (< 90%)"])
    explained = explain_int8_mismatch(error, reduce_range, cpuinfo)
    assert str(explained).startswith(str(error))
    assert ("--int8-reduce-range" in str(explained)) is hinted
    assert cpu_has_vnni(tmp_path / "absent") is None
