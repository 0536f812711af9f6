"""Export of the sequence-pair tasks chosen with --task: rerank (cross-encoders) and zero-shot-classification (NLI)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from contract.bundle import BundleError, BundleSpec, read_bundle
from contract.onnx_io import pad_rows
from contract.tasks import TASKS, entailment_id
from model_export.__main__ import main
from model_export.export import ExportError, export_bundle

PAIRS = [
    ("where did john go?", "john went to paris to see the river."),
    ("the movie", "a great film, the plot was good."),
    ("bad", "the actor was terrible"),
]


def pair_feed(bundle: Path) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    encodings = tokenizer.encode_batch(PAIRS)
    return pad_rows([(e.ids, e.type_ids) for e in encodings], pad_token_id=tokenizer.token_to_id("[PAD]")).feeds


def onnx_logits(bundle: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    return session.run(["logits"], feed)[0]


def transformers_logits(checkpoint: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    import torch
    import transformers

    model = transformers.BertForSequenceClassification.from_pretrained(checkpoint, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**{name: torch.from_numpy(value) for name, value in feed.items()}).logits.numpy()


def test_cli_exports_a_one_logit_cross_encoder_as_rerank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoint: Callable[[str, str], Path]
) -> None:
    source, out = checkpoint("transformers", "rerank"), tmp_path / "rerank"
    assert main([str(source), str(out), "--task", "rerank", "--quiet"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    spec = read_bundle(out).spec
    assert (spec.task, spec.architecture, spec.outputs) == ("rerank", "BertForSequenceClassification", ["logits"])
    assert spec.id2label == {0: "LABEL_0"}  # a 1-label head: the bundle says how its logit becomes a score
    feed = pair_feed(out)
    got, expected = onnx_logits(out, feed), transformers_logits(source, feed)
    assert got.shape == expected.shape == (len(PAIRS), 1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_zero_shot_export_keeps_the_nli_labels(tmp_path: Path, checkpoint: Callable[[str, str], Path]) -> None:
    source = checkpoint("ours", "zero-shot-classification")
    bundle = export_bundle(source, tmp_path / "nli", task="zero-shot-classification")
    assert bundle.spec.task == "zero-shot-classification"
    assert bundle.spec.id2label == {0: "contradiction", 1: "neutral", 2: "entailment"}
    assert entailment_id(bundle.spec.id2label) == 2
    feed = pair_feed(bundle.path)
    np.testing.assert_allclose(onnx_logits(bundle.path, feed), transformers_logits(source, feed), rtol=0, atol=1e-4)


def test_a_sequence_classifier_is_never_detected_as_rerank_or_zero_shot(
    tmp_path: Path, checkpoint: Callable[[str, str], Path]
) -> None:
    assert not TASKS["rerank"].detect_from and not TASKS["zero-shot-classification"].detect_from
    assert export_bundle(checkpoint("transformers", "rerank"), tmp_path / "auto").spec.task == "text-classification"


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("zero-shot-classification", "needs an NLI head with an entailment label; its labels are: negative, neutral"),
        ("rerank", "rerank needs a cross-encoder head with 1 output (a relevance logit) or 2 labels"),
    ],
)
def test_cli_refuses_a_head_that_cannot_serve_the_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoint: Callable[[str, str], Path], task: str, message: str
) -> None:
    source = checkpoint("transformers", "text-classification")  # labels negative, neutral, positive
    out = tmp_path / "out"
    assert main([str(source), str(out), "--task", task, "--quiet"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("bertserve-export: error:") and error.count("\n") == 1
    assert message in error and str(source) in error
    assert not out.exists()
    with pytest.raises(ExportError, match="entailment" if task != "rerank" else "1 output"):
        export_bundle(source, out, task=task)


def test_the_bundle_reader_refuses_heads_that_cannot_serve_the_task() -> None:
    def spec(task: str, id2label: dict[int, str]) -> BundleSpec:
        architecture = "BertForSequenceClassification"
        return BundleSpec(task=task, architecture=architecture, max_length=64, id2label=id2label, outputs=["logits"])

    spec("zero-shot-classification", {0: "contradiction", 1: "Entailment"}).check()
    spec("rerank", {0: "LABEL_0"}).check()
    spec("rerank", {0: "no", 1: "yes"}).check()
    with pytest.raises(BundleError, match="entailment label"):
        spec("zero-shot-classification", {0: "not_entailment", 1: "other"}).check()
    with pytest.raises(BundleError, match="this head has 3"):
        spec("rerank", {0: "a", 1: "b", 2: "c"}).check()
    with pytest.raises(BundleError, match="needs id2label"):
        spec("rerank", {}).check()


def test_entailment_id_finds_the_label_as_the_pipeline_does() -> None:
    assert entailment_id({0: "contradiction", 1: "neutral", 2: "entailment"}) == 2
    assert entailment_id({0: "ENTAILMENT", 1: "neutral", 2: "contradiction"}) == 0
    assert entailment_id({0: "not_entailment", 1: "entailment"}) == 1
    assert entailment_id({0: "LABEL_0", 1: "LABEL_1"}) is None
