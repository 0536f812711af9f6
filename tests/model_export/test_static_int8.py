"""Static int8 (--int8-calibration): QDQ MatMuls with activation scales fixed at export, so an answer does not
depend on what it is batched with; bundle.json says how it was calibrated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contract.onnx_io import ort_session, pad_rows, run_session
from model_export.__main__ import main
from model_export.export import ExportError, export_bundle
from model_export.task_eval import EvalModel, predict, row_windows
from tests.model_export.test_int8_gate import op_types, random_sentences, write_jsonl
from tests.model_export.test_int8_gate import wide_classifier as wide_classifier  # the fixture


@pytest.fixture(scope="module")
def static_bundle(wide_classifier: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("static-int8")
    rows = [{"text": " ".join(words), "label": "negative"} for words in random_sentences(64, seed=5)]
    calibration = write_jsonl(folder / "calibration.jsonl", rows)
    out = folder / "bundle"
    assert (
        main([str(wide_classifier), str(out), "--quantize", "int8", "--int8-calibration", str(calibration), "-q"]) == 0
    )
    return out


def test_the_static_graph_quantises_matmuls_with_fixed_scales(static_bundle: Path) -> None:
    from contract.bundle import read_bundle

    bundle = read_bundle(static_bundle)
    ops = op_types(bundle.model_path)
    assert ops["QuantizeLinear"] > 0 and ops["DequantizeLinear"] > 0
    assert not ops["DynamicQuantizeLinear"] and not ops["DynamicQuantizeMatMul"]  # no range measured when serving
    calibration = bundle.spec.parity["int8"]["calibration"]
    assert calibration["rows"] == 64 and calibration["windows"] == 64 and len(calibration["data_sha256"]) == 64
    assert bundle.spec.quantization == "int8"


def test_a_static_int8_answer_is_the_same_alone_or_batched(static_bundle: Path, wide_classifier: Path) -> None:
    from contract.bundle import read_bundle

    bundle = read_bundle(static_bundle)
    model = EvalModel.from_bundle(bundle)
    texts = [{"text": " ".join(words), "label": "negative"} for words in random_sentences(6, seed=9, low=2, high=30)]
    windows = row_windows(model, texts)
    session = ort_session(bundle.model_path)
    together = run_session(session, pad_rows(windows, model.pad_token_id).feeds)["logits"]
    alone = np.concatenate([run_session(session, pad_rows([w], model.pad_token_id).feeds)["logits"] for w in windows])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    fp32 = export_bundle(wide_classifier, static_bundle.parent / "fp32")
    agree = np.mean(
        np.array(predict(model, fp32.model_path, texts)) == np.array(predict(model, bundle.model_path, texts))
    )
    assert agree >= 0.5  # quantised, yet the same classifier


def test_calibration_needs_int8(wide_classifier: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "c.jsonl", [{"text": "the movie", "label": "negative"}])
    with pytest.raises(ExportError, match="int8"):
        export_bundle(wide_classifier, tmp_path / "out", int8_calibration=data)
