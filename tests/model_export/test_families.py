"""Export of the BERT family's other encoders: every head, int8, sentence embeddings, pair tasks, and refusals.

The served answers of text and token classification, QA and fill-mask are compared with the pipelines in
tests/service/test_family_parity.py; here the export itself: parity figures, graph inputs, the task auto-detected
from the architecture, int8 within the gate, embeddings equal to sentence-transformers', and clear refusals.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from contract.onnx_io import ort_session, run_session  # noqa: E402
from model_export.export import ExportError, export_bundle  # noqa: E402
from model_export.families import FAMILIES  # noqa: E402
from model_export.family_checkpoints import KITS, build_family_checkpoint, train_tokenizer  # noqa: E402

OTHER_FAMILIES = [model_type for model_type in KITS if model_type != "bert"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("families")


@pytest.mark.parametrize("model_type", OTHER_FAMILIES)
def test_int8_export_with_the_task_from_the_architecture(root: Path, model_type: str) -> None:
    checkpoint = build_family_checkpoint(model_type, "token-classification", root / f"{model_type}-ner")
    bundle = export_bundle(checkpoint, root / f"{model_type}-ner-int8", quantize="int8")
    spec = bundle.spec
    assert spec.task == "token-classification"
    assert spec.architecture == f"{KITS[model_type].prefix}ForTokenClassification"
    assert spec.quantization == "int8"
    assert spec.parity["fp32"]["max_abs_diff"]["logits"] < 1e-4
    assert spec.parity["int8"]["top1_agreement"]["logits"] >= 0.9
    attention = spec.fused_operators.get("Attention", 0)
    assert (attention == 2) == FAMILIES[model_type].fusion, spec.fused_operators


@pytest.mark.parametrize("model_type", ["distilbert", "roberta", "mpnet", "deberta-v2", "modernbert"])
def test_sentence_embeddings_equal_sentence_transformers(root: Path, model_type: str) -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    checkpoint = build_family_checkpoint(model_type, "feature-extraction", root / f"{model_type}-encoder")
    bundle = export_bundle(checkpoint, root / f"{model_type}-embed", task="feature-extraction")
    texts = ["The movie was wonderful.", "John went to Paris on monday, said Mary!", "a"]
    oracle = sentence_transformers.SentenceTransformer(str(checkpoint), device="cpu")
    expected = oracle.encode(texts, normalize_embeddings=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    feeds = tokenizer(texts, padding=True, return_tensors="np")
    session = ort_session(bundle.model_path)
    got = run_session(session, {name: np.asarray(value, dtype=np.int64) for name, value in feeds.items()})
    np.testing.assert_allclose(got["sentence_embedding"], expected, atol=1e-5)
    assert bundle.spec.inputs == (["input_ids", "attention_mask", "token_type_ids"][: len(session.get_inputs())])


@pytest.mark.parametrize("task", ["rerank", "zero-shot-classification"])
def test_pair_tasks_take_a_roberta_classifier(root: Path, task: str) -> None:
    checkpoint = build_family_checkpoint("roberta", "text-classification", root / f"roberta-pair-{task}")
    config = json.loads((checkpoint / "config.json").read_text())
    labels = ["contradiction", "entailment"] if task == "zero-shot-classification" else ["irrelevant", "relevant"]
    config["id2label"] = dict(enumerate(labels))
    config["label2id"] = {label: index for index, label in enumerate(labels)}
    (checkpoint / "config.json").write_text(json.dumps(config))
    bundle = export_bundle(checkpoint, root / f"roberta-{task}", task=task)
    assert bundle.spec.task == task
    assert bundle.spec.inputs == ["input_ids", "attention_mask"]


def test_an_unknown_family_is_told_which_are_accepted(root: Path) -> None:
    folder = root / "gpt2"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8)).save_pretrained(folder)
    with pytest.raises(ExportError, match=r"model_type is 'gpt2'; export accepts the BERT family: bert .*modernbert"):
        export_bundle(folder, root / "gpt2-bundle", task="text-classification")


def test_a_checkpoint_without_the_head_is_refused(root: Path) -> None:
    checkpoint = build_family_checkpoint("roberta", "text-classification", root / "roberta-classifier")
    with pytest.raises(ExportError, match=r"no trained weights for task question-answering \(missing: qa_outputs"):
        export_bundle(checkpoint, root / "roberta-qa", task="question-answering")


def test_an_electra_discriminator_has_no_task_of_its_own(root: Path) -> None:
    folder = root / "electra-discriminator"
    kit = KITS["electra"]
    config = transformers.ElectraConfig(vocab_size=50, embedding_size=8, **{k: v for k, v in kit.config.items()
                                                                           if k != "embedding_size"})  # fmt: skip
    transformers.ElectraForPreTraining(config).save_pretrained(folder)
    with pytest.raises(ExportError, match=r"cannot infer a task from architecture 'ElectraForPreTraining'"):
        export_bundle(folder, root / "electra-bundle")
    with pytest.raises(ExportError, match=r"no trained weights for task fill-mask"):
        export_bundle(folder, root / "electra-bundle", task="fill-mask")


def test_the_position_table_bounds_max_length(root: Path) -> None:
    checkpoint = build_family_checkpoint("roberta", "text-classification", root / "roberta-positions")
    with pytest.raises(ExportError, match=r"--max-length 129 is outside 2\.\.128"):
        export_bundle(checkpoint, root / "roberta-long", max_length=129)


@pytest.mark.parametrize("model_type", sorted(KITS))
def test_the_test_tokenizers_are_the_same_each_time(model_type: str) -> None:
    """Another vocabulary means another random model, whose near-ties at the pipelines' top-k cuts fall elsewhere."""
    made = [train_tokenizer(KITS[model_type]).to_str() for _ in range(3)]
    assert made[1:] == made[:1] * 2
    vocabulary = json.loads(made[0])["model"]["vocab"]
    assert len(vocabulary) >= 300
