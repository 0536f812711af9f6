"""feature-extraction exports: pooling and normalisation inside the graph, read from sentence-transformers' files."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from contract.bundle import BundleError, BundleSpec
from model_export.__main__ import main
from model_export.checkpoint_files import sentence_pooling
from model_export.export import ExportError, export_bundle
from tests.model_export.conftest import SAMPLE_TEXTS
from tests.model_export.sentence_models import make_encoder, make_sentence_transformer
from tests.model_export.test_export import encode, mean_pooled, op_counts, ort_outputs

SENTENCES = [*SAMPLE_TEXTS, "the film was good", "a story of paris and london"]


def transformers_states(checkpoint: Path, feed: dict[str, np.ndarray]) -> np.ndarray:
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(checkpoint, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**{name: torch.from_numpy(value) for name, value in feed.items()}).last_hidden_state.numpy()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plain BertModel checkpoint: no sentence-transformers files."""
    return make_encoder(tmp_path_factory.mktemp("encoder") / "bert")


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", True), ("cls", False), ("mean", False), ("cls", True)])
def test_the_graph_pools_and_normalises_like_torch(encoder: Path, tmp_path: Path, pooling: str, normalize: bool):
    bundle = export_bundle(encoder, tmp_path / "out", pooling=pooling, normalize=normalize)
    assert (bundle.spec.task, bundle.spec.outputs) == ("feature-extraction", ["sentence_embedding"])
    assert (bundle.spec.pooling, bundle.spec.normalize) == (pooling, normalize)
    written = json.loads((bundle.path / "bundle.json").read_text())
    assert (written["pooling"], written["normalize"]) == (pooling, normalize)
    assert op_counts(bundle.model_path)["Attention"] == 2  # the pooling tail does not stop attention fusing

    feed = encode(bundle.path, SENTENCES)
    states = transformers_states(encoder, feed)
    if pooling == "mean":
        expected = mean_pooled(states, feed["attention_mask"], normalize)
    else:
        expected = states[:, 0].astype(np.float64)
        if normalize:
            expected /= np.linalg.norm(expected, axis=-1, keepdims=True)
    got = ort_outputs(bundle.path, feed)["sentence_embedding"]
    assert got.shape == (len(SENTENCES), 32)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)
    # Padding does not leak into a row: each sentence alone gives the same vector as in the padded batch.
    alone = ort_outputs(bundle.path, encode(bundle.path, SENTENCES[2:3]))["sentence_embedding"]
    np.testing.assert_allclose(alone[0], got[2], rtol=0, atol=1e-5)


def test_without_sentence_transformers_files_the_default_is_mean_and_normalize(
    bundle: Callable[..., Path], checkpoint: Callable[[str, str], Path]
) -> None:
    spec = BundleSpec.from_json(json.loads((bundle("ours", "feature-extraction") / "bundle.json").read_text()))
    assert (spec.pooling, spec.normalize) == ("mean", True)
    assert spec.parity["fp32"]["max_abs_diff"]["sentence_embedding"] <= 1e-5
    assert sentence_pooling(checkpoint("transformers", "feature-extraction")).source == "default"


@pytest.mark.parametrize(("pooling", "normalize"), [("mean", True), ("cls", False)])
def test_auto_reads_a_saved_sentence_transformer(tmp_path: Path, pooling: str, normalize: bool) -> None:
    folder = make_sentence_transformer(tmp_path / "st", pooling=pooling, normalize=normalize)
    found = sentence_pooling(folder)
    assert (found.pooling, found.normalize, found.source) == (pooling, normalize, "modules.json")
    status = main([str(folder), str(tmp_path / "out"), "--quiet"])
    assert status == 0
    spec = json.loads((tmp_path / "out" / "bundle.json").read_text())
    assert (spec["task"], spec["pooling"], spec["normalize"]) == ("feature-extraction", pooling, normalize)


def write_st_files(folder: Path, modules: list[str], pooling_config: dict | None = None, **bert_config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    entries = [
        {
            "idx": index,
            "name": str(index),
            "path": "1_Pooling" if name == "Pooling" else "",
            "type": f"sentence_transformers.models.{name}",
        }
        for index, name in enumerate(modules)
    ]
    (folder / "modules.json").write_text(json.dumps(entries))
    if pooling_config is not None:
        (folder / "1_Pooling").mkdir(exist_ok=True)
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    if bert_config:
        (folder / "sentence_bert_config.json").write_text(json.dumps(bert_config))
    return folder


LEGACY_MEAN = {"word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True}
LEGACY_CLS = {"word_embedding_dimension": 32, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}


@pytest.mark.parametrize(
    ("modules", "config", "expected"),
    [
        (["Transformer", "Pooling", "Normalize"], LEGACY_MEAN, ("mean", True)),
        (["Transformer", "Pooling"], LEGACY_CLS, ("cls", False)),
        (["Transformer", "Pooling", "Normalize"], {"embedding_dimension": 32, "pooling_mode": "cls"}, ("cls", True)),
        (["Transformer", "Pooling"], {"pooling_mode": ["mean"]}, ("mean", False)),
        (["Transformer", "Pooling"], {"word_embedding_dimension": 32}, ("mean", False)),  # no flag set: mean
    ],
)
def test_pooling_is_read_from_modules_json(tmp_path: Path, modules: list[str], config: dict, expected) -> None:
    found = sentence_pooling(write_st_files(tmp_path, modules, config, max_seq_length=64))
    assert (found.pooling, found.normalize, found.max_seq_length) == (*expected, 64)
    # Explicit choices win over the files.
    assert sentence_pooling(tmp_path, "cls", normalize=False).pooling == "cls"
    assert sentence_pooling(tmp_path, "mean", normalize=True).normalize is True


@pytest.mark.parametrize(
    ("modules", "config", "message"),
    [
        (["Transformer", "Pooling", "Dense", "Normalize"], LEGACY_MEAN, "module(s) Dense cannot be exported"),
        (["Transformer", "Pooling"], {"pooling_mode_max_tokens": True}, "pooling max cannot be exported"),
        (["Transformer", "Pooling"], {"pooling_mode": ["cls", "mean"]}, "pooling cls + mean cannot be exported"),
        (["Transformer", "Pooling"], {"pooling_mode": "lasttoken"}, "pooling lasttoken cannot be exported"),
    ],
)
def test_what_the_graph_cannot_compute_is_refused(tmp_path: Path, modules, config: dict, message: str) -> None:
    with pytest.raises(ExportError, match=re.escape(message)):
        sentence_pooling(write_st_files(tmp_path, modules, config))


def test_sentence_bert_config_sets_the_max_length(encoder: Path, tmp_path: Path) -> None:
    import shutil

    source = shutil.copytree(encoder, tmp_path / "ckpt")
    write_st_files(source, ["Transformer", "Pooling"], {"pooling_mode": "cls"}, max_seq_length=48)
    spec = export_bundle(source, tmp_path / "out", optimize=False).spec
    assert (spec.max_length, spec.pooling, spec.normalize) == (48, "cls", False)
    assert export_bundle(source, tmp_path / "out", optimize=False, max_length=64).spec.max_length == 64


def test_int8_embeddings_keep_their_direction_on_the_probe_texts(encoder: Path, tmp_path: Path) -> None:
    spec = export_bundle(encoder, tmp_path / "int8", quantize="int8").spec
    texts = spec.parity["int8"]["texts"]
    assert texts["min_cosine"]["sentence_embedding"] >= texts["tolerance"]["min_cosine"] == 0.98
    assert spec.parity["int8"]["min_cosine"]["sentence_embedding"] >= spec.parity["int8"]["tolerance"]["min_cosine"]


def test_cli_pooling_flags(encoder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoint) -> None:
    assert main([str(encoder), str(tmp_path / "out"), "--pooling", "cls", "--no-normalize", "--no-optimize", "-q"]) == 0
    spec = json.loads((tmp_path / "out" / "bundle.json").read_text())
    assert (spec["pooling"], spec["normalize"]) == ("cls", False)
    status = main([str(checkpoint("ours", "fill-mask")), str(tmp_path / "mlm"), "--pooling", "cls", "-q"])
    error = capsys.readouterr().err
    assert status == 1 and error.count("\n") == 1
    assert "pooling and normalize apply to feature-extraction only, not fill-mask" in error


def test_the_bundle_reader_checks_pooling() -> None:
    embedding = {"task": "feature-extraction", "architecture": "BertModel", "max_length": 64}
    spec = BundleSpec(**embedding, outputs=["sentence_embedding"], pooling="mean", normalize=True)
    assert BundleSpec.from_json(spec.to_json()).pooling == "mean"
    with pytest.raises(BundleError, match="needs pooling in"):
        BundleSpec(**embedding, outputs=["sentence_embedding"]).check()
    with pytest.raises(BundleError, match="needs pooling in"):
        BundleSpec(**embedding, outputs=["sentence_embedding"], pooling="max").check()
    with pytest.raises(BundleError, match="apply to feature-extraction only"):
        BundleSpec(
            task="fill-mask", architecture="BertForMaskedLM", max_length=64, outputs=["logits"], pooling="mean"
        ).check()
    # Bundles written before these fields existed still read (they are optional) ...
    classifier = BundleSpec(
        task="text-classification", architecture="BertForSequenceClassification", max_length=64,
        id2label={0: "no", 1: "yes"}, outputs=["logits"],
    ).to_json()  # fmt: skip
    del classifier["pooling"], classifier["normalize"]
    assert BundleSpec.from_json(classifier).pooling is None
    # ... and an embedding one without pooling says what it lacks.
    old = spec.to_json()
    del old["pooling"], old["normalize"]
    with pytest.raises(BundleError, match="needs pooling in"):
        BundleSpec.from_json(old)
    # An old feature-extraction bundle (token states out) names the outputs it needs.
    with pytest.raises(BundleError, match=r"needs outputs \['sentence_embedding'\]"):
        BundleSpec.from_json({**spec.to_json(), "outputs": ["last_hidden_state", "pooler_output"]})
