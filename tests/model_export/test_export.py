"""export_bundle and the CLI on tiny random checkpoints of every task, ours and transformers-made."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from contract.bundle import read_bundle
from contract.onnx_io import pad_rows
from contract.tasks import TASKS as TASK_TABLE
from model_export import export as export_module
from model_export.__main__ import main
from model_export.export import ParityError, export_bundle
from model_export.validate import ValueMismatch
from tests.model_export.conftest import ARCHITECTURES, ORIGINS, SAMPLE_TEXTS, TASKS, TINY, vocab_size, write_vocab

CLASSIFICATION_TASKS = ("text-classification", "token-classification")


def op_counts(model_path: Path) -> Counter[str]:
    return Counter(node.op_type for node in onnx.load(str(model_path)).graph.node)


def ort_outputs(bundle_path: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(bundle_path / "model.onnx"), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def mean_pooled(hidden, attention_mask: np.ndarray, normalize: bool = True) -> np.ndarray:
    """sentence-transformers' mean pooling (+ Normalize) of (B, T, H) token states, in float64 numpy."""
    hidden = np.asarray(hidden, dtype=np.float64)
    weights = attention_mask[..., None].astype(np.float64)
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True) if normalize else pooled


def encode(bundle_path: Path, texts: list[str]) -> dict[str, np.ndarray]:
    """The bundle's own tokenizer, padded by hand (the bundle bakes no padding in)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle_path / "tokenizer.json"))
    encodings = tokenizer.encode_batch(texts)
    pad_id = tokenizer.token_to_id("[PAD]")
    return pad_rows([(encoding.ids, encoding.type_ids) for encoding in encodings], pad_token_id=pad_id).feeds


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("origin", ORIGINS)
def test_every_task_exports_to_a_valid_bundle(
    origin: str, task: str, checkpoint: Callable[[str, str], Path], bundle: Callable[..., Path]
) -> None:
    folder = bundle(origin, task)
    spec = read_bundle(folder).spec
    config = json.loads((checkpoint(origin, task) / "config.json").read_text())
    assert spec.task == task
    assert spec.outputs == list(TASK_TABLE[task].outputs)
    assert spec.architecture == config["architectures"][0]
    if task in CLASSIFICATION_TASKS:
        assert spec.id2label == {int(index): label for index, label in config["id2label"].items()}
    weights = (checkpoint(origin, task) / "model.safetensors").read_bytes()
    assert spec.source_weights_sha256 == hashlib.sha256(weights).hexdigest()
    assert spec.onnxruntime_version == ort.__version__
    assert all(diff <= 1e-4 for diff in spec.parity["fp32"]["max_abs_diff"].values())
    assert spec.fused_operators["Attention"] == TINY["num_hidden_layers"]
    tokenizer_json = json.loads((folder / "tokenizer.json").read_text())
    assert tokenizer_json["padding"] is None and tokenizer_json["truncation"] is None
    assert sorted(path.name for path in folder.iterdir()) == ["bundle.json", "model.onnx", "tokenizer.json"]
    assert not [path for path in folder.parent.iterdir() if ".partial-" in path.name]


@pytest.mark.parametrize("task", TASKS)
def test_onnx_matches_transformers(task: str, checkpoint: Callable[[str, str], Path], bundle: Callable[..., Path]):
    import torch
    import transformers

    folder = bundle("transformers", task)
    source = checkpoint("transformers", task)
    feed = encode(folder, SAMPLE_TEXTS)
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    expected_ids = hf_tokenizer(SAMPLE_TEXTS, padding=True, return_tensors="np")["input_ids"]
    np.testing.assert_array_equal(feed["input_ids"], expected_ids)

    model = getattr(transformers, ARCHITECTURES[task]).from_pretrained(source, attn_implementation="eager").eval()
    with torch.no_grad():
        reference = dict(model(**{name: torch.from_numpy(value) for name, value in feed.items()}))
    if task == "feature-extraction":  # no modules.json: mean pooling and L2 normalisation, in the graph
        reference["sentence_embedding"] = mean_pooled(reference["last_hidden_state"], feed["attention_mask"])
    got = ort_outputs(folder, feed)
    mask = feed["attention_mask"].astype(bool)
    for name in TASK_TABLE[task].outputs:
        expected = np.asarray(reference[name])
        assert got[name].shape == expected.shape
        if TASK_TABLE[task].is_token_level(name):
            expected, actual = expected[mask], got[name][mask]
        else:
            actual = got[name]
        np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("task", ["text-classification", "fill-mask"])
def test_attention_fuses_in_every_layer(task: str, bundle: Callable[..., Path]) -> None:
    counts = op_counts(bundle("ours", task) / "model.onnx")
    assert counts["Attention"] == TINY["num_hidden_layers"]
    assert counts["Softmax"] == 0  # every attention softmax now lives inside a fused Attention node


def test_int8_bundle_reports_agreement_and_speed(bundle: Callable[..., Path]) -> None:
    folder = bundle("ours", "token-classification", "int8")
    spec = read_bundle(folder).spec
    assert spec.quantization == "int8"
    assert op_counts(folder / "model.onnx")["QAttention"] == TINY["num_hidden_layers"]
    int8 = spec.parity["int8"]
    assert int8["top1_agreement"]["logits"] >= int8["tolerance"]["min_top1_agreement"]
    assert 0.0 <= int8["vs_fp32"]["top1_agreement"]["logits"] <= 1.0
    assert int8["speedup_vs_fp32"] == pytest.approx(
        int8["int8_sequences_per_second"] / int8["fp32_sequences_per_second"], rel=0.01
    )
    fp32_folder = bundle("ours", "token-classification")
    feed = encode(folder, SAMPLE_TEXTS)
    mask = feed["attention_mask"].astype(bool)
    int8_labels = ort_outputs(folder, feed)["logits"].argmax(-1)[mask]
    fp32_labels = ort_outputs(fp32_folder, feed)["logits"].argmax(-1)[mask]
    assert (int8_labels == fp32_labels).mean() >= 0.8
    assert (folder / "model.onnx").stat().st_size < (fp32_folder / "model.onnx").stat().st_size


def tamper_with_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the exporter write a wrong graph: the embeddings LayerNorm bias shifted after export."""
    original = export_module.export_onnx

    def tampered(adapter, path: Path, task: str, opset: int) -> None:
        original(adapter, path, task, opset)
        model = onnx.load(str(path))
        target = next(init for init in model.graph.initializer if init.name.endswith("embeddings.LayerNorm.bias"))
        values = onnx.numpy_helper.to_array(target) + 0.5
        target.CopyFrom(onnx.numpy_helper.from_array(values, target.name))
        onnx.save(model, str(path))

    monkeypatch.setattr(export_module, "export_onnx", tampered)


def test_tampered_graph_fails_parity_and_leaves_no_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: Callable[[str, str], Path]
) -> None:
    tamper_with_export(monkeypatch)
    with pytest.raises(ParityError, match="differs from torch"):
        export_bundle(checkpoint("ours", "text-classification"), tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_failed_export_keeps_the_previous_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: Callable[[str, str], Path], bundle
) -> None:
    import shutil

    out = tmp_path / "out"
    shutil.copytree(bundle("ours", "question-answering"), out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    tamper_with_export(monkeypatch)
    with pytest.raises(ParityError):
        export_bundle(checkpoint("ours", "question-answering"), out)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_cli_failure_is_one_line_and_non_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], checkpoint
) -> None:
    tamper_with_export(monkeypatch)
    status = main([str(checkpoint("ours", "fill-mask")), str(tmp_path / "out"), "--quiet"])
    error = capsys.readouterr().err
    assert status != 0
    assert error.count("\n") == 1 and error.startswith("bertserve-export: error:") and "differs from torch" in error
    assert not (tmp_path / "out").exists()


def test_cli_writes_a_bundle_with_the_requested_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoint
) -> None:
    out = tmp_path / "out"
    status = main(
        [str(checkpoint("transformers", "feature-extraction")), str(out), "--no-optimize", "--max-length", "64"]
    )
    assert status == 0
    assert capsys.readouterr().out.strip() == str(out)
    spec = read_bundle(out).spec
    assert (spec.max_length, spec.optimized, spec.fused_operators) == (64, False, {})
    assert op_counts(out / "model.onnx")["Attention"] == 0


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--task", "text-classification"], "no trained weights for task text-classification"),
        (["--max-length", "4096"], "outside 2..128"),
        (["--precision", "fp16"], "CUDA"),
    ],
)
def test_cli_rejects_bad_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoint, arguments: list[str], message: str
) -> None:
    status = main([str(checkpoint("ours", "fill-mask")), str(tmp_path / "out"), "--quiet", *arguments])
    error = capsys.readouterr().err
    assert status == 1 and message in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_cli_refuses_to_replace_a_folder_that_is_not_a_bundle(tmp_path: Path, capsys, checkpoint) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main([str(checkpoint("ours", "fill-mask")), str(out), "--quiet"]) == 1
    assert "refusing to replace" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "keep me"


def test_missing_checkpoint_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing"), str(tmp_path / "out"), "--quiet"]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "missing" in error and "Traceback" not in error


def test_a_tool_failure_becomes_a_one_line_export_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], checkpoint
) -> None:
    def broken_quantiser(source: Path, target: Path, keep_fp32: object = (), reduce_range: bool = False) -> None:
        raise RuntimeError("quantiser exploded\nwith a second line of detail")

    monkeypatch.setattr(export_module.graph_rewrites, "quantize_int8", broken_quantiser)
    status = main([str(checkpoint("ours", "text-classification")), str(tmp_path / "out"), "--quantize", "int8", "-q"])
    error = capsys.readouterr().err
    assert status == 1
    assert (
        error == "bertserve-export: error: quantizing to int8 (dynamic, per-channel) failed: RuntimeError: "
        "quantiser exploded\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_pretraining_checkpoint_serves_fill_mask_and_feature_extraction(tmp_path: Path) -> None:
    import torch
    import transformers

    from tests.model_export.conftest import vocab_size, write_vocab

    source = tmp_path / "pretraining"
    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=vocab_size(), **TINY, attn_implementation="eager")
    transformers.BertForPreTraining(config).eval().save_pretrained(source)
    transformers.BertTokenizer(str(write_vocab(source))).save_pretrained(source)

    fill_mask = export_bundle(source, tmp_path / "fill-mask")
    features = export_bundle(source, tmp_path / "features", task="feature-extraction")
    assert (fill_mask.spec.task, features.spec.task) == ("fill-mask", "feature-extraction")
    assert fill_mask.spec.architecture == features.spec.architecture == "BertForPreTraining"

    feed = encode(fill_mask.path, SAMPLE_TEXTS)
    mask = feed["attention_mask"].astype(bool)
    with torch.no_grad():
        inputs = {name: torch.from_numpy(value) for name, value in feed.items()}
        pretraining = transformers.BertForPreTraining.from_pretrained(source, attn_implementation="eager").eval()
        expected_logits = pretraining(**inputs).prediction_logits.numpy()
        encoder = transformers.BertModel.from_pretrained(source, attn_implementation="eager").eval()(**inputs)
    got_logits = ort_outputs(fill_mask.path, feed)["logits"]
    np.testing.assert_allclose(got_logits[mask], expected_logits[mask], rtol=0, atol=1e-4)
    got = ort_outputs(features.path, feed)["sentence_embedding"]
    expected = mean_pooled(encoder.last_hidden_state, feed["attention_mask"])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("flag", [True, False])
def test_clean_up_tokenization_spaces_travels_into_the_bundle(
    flag: bool, tmp_path: Path, checkpoint: Callable[[str, str], Path]
) -> None:
    import shutil

    from service.engine import Engine

    source = shutil.copytree(checkpoint("transformers", "fill-mask"), tmp_path / "ckpt")
    config_path = source / "tokenizer_config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "clean_up_tokenization_spaces": flag}))
    exported = export_bundle(source, tmp_path / "bundle", optimize=False)
    assert exported.spec.clean_up_tokenization_spaces is flag
    engine = Engine.from_bundle(exported.path)
    assert engine.context.clean_up_tokenization_spaces is flag


def make_large_logit_fill_mask(folder: Path) -> Path:
    """A tiny BertForMaskedLM with large weights: logits in the hundreds, relatively exact but not to 1e-4."""
    import torch
    import transformers

    torch.manual_seed(3)
    values = {**TINY, "vocab_size": vocab_size(), "initializer_range": 0.5, "hidden_size": 64, "intermediate_size": 128}
    model = transformers.BertForMaskedLM(transformers.BertConfig(**values, attn_implementation="eager")).eval()
    model.save_pretrained(folder)
    transformers.BertTokenizer(str(write_vocab(folder)), do_lower_case=True).save_pretrained(folder)
    return folder


def test_large_logit_fill_mask_exports_with_default_tolerance(tmp_path: Path) -> None:
    source = make_large_logit_fill_mask(tmp_path / "ckpt")
    report = export_bundle(source, tmp_path / "out").spec.parity["fp32"]
    # an absolute tolerance alone would have refused this relatively exact graph
    assert report["max_abs_diff"]["logits"] > report["tolerance"]["atol"]
    assert report["tolerance"]["rtol"] > 0


def test_perturbed_weight_fails_with_a_value_mismatch_for_every_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: Callable[[str, str], Path]
) -> None:
    tamper_with_export(monkeypatch)
    with pytest.raises(ValueMismatch) as caught:
        export_bundle(checkpoint("ours", "question-answering"), tmp_path / "out")
    failures = caught.value.failures
    assert [failure.split()[1] for failure in failures] == ["start_logits", "end_logits"]
    assert all("worst at probe batch" in failure and "values outside" in failure for failure in failures)
