"""--relevance-head: a cross-encoder for rerank from sentence-pair data (one output, binary cross-entropy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from contract.tasks import task_spec
from tests.training.conftest import TINY_CORPUS
from training.checkpoint import load_model
from training.cli import main
from training.data import DataError, collate
from training.relevance import relevance_targets
from training.tokenizer import load_tokenizer, save_tokenizer

transformers = pytest.importorskip("transformers")

SENTENCES = [s.strip() for line in TINY_CORPUS for s in line.replace("?", ".").split(". ") if s.strip()]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, tiny_wordpiece) -> Path:
    folder = tmp_path_factory.mktemp("tiny-base")
    config = transformers.BertConfig(
        vocab_size=tiny_wordpiece.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.BertForPreTraining(config).save_pretrained(folder)
    save_tokenizer(tiny_wordpiece, folder)
    return folder


UNRELATED = SENTENCES[0]


def pair_file(path: Path) -> Path:
    """RTE-style pairs: a sentence with itself is entailed (relevant), with one fixed other sentence it is not (a
    signal a two-layer model learns within a few epochs whatever the seed: comparing two sentences it does not)."""
    rows = []
    for index, sentence in enumerate(SENTENCES[1:]):
        rows.append(f"{index}\t{sentence}\t{sentence}\tentailment")
        rows.append(f"{index}\t{sentence}\t{UNRELATED}\tnot_entailment")
    path.write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    return path


def test_relevance_head_trains_one_output_that_rerank_exports_and_transformers_loads(
    tiny_base: Path, tmp_path: Path, capsys
) -> None:
    data = pair_file(tmp_path / "pairs.tsv")
    out = tmp_path / "reranker"
    argv = [
        "finetune", "--task", "text-classification", "--base", str(tiny_base), "--train", str(data),
        "--eval", str(data), "--out", str(out), "--relevance-head", "--labels", "not_entailment,entailment",
        "--epochs", "12", "--lr", "1e-2", "--batch-size", "4", "--max-length", "48", "--seed", "0",
    ]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert {"accuracy", "brier"} <= set(history[0])
    assert history[-1]["brier"] < 0.2 < history[0]["brier"]  # chance is 0.25; seeds 0-3 are at 0.04-0.11 by epoch 6
    # the tiny model's per-epoch loss is noisy (torch's thread count differs across the suite): some later epoch
    # must beat the first, and the held-out Brier score (above) must end lower than it began
    assert min(epoch["train_loss"] for epoch in history[1:]) < history[0]["train_loss"]

    config = json.loads((out / "config.json").read_text())
    assert config["problem_type"] == "regression" and len(config["id2label"]) == 1
    assert task_spec("rerank").labels_problem({int(k): v for k, v in config["id2label"].items()}) is None

    reference, info = transformers.AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    encoding = load_tokenizer(out).encode(SENTENCES[0], SENTENCES[0])
    inputs = {
        "input_ids": torch.tensor([encoding.ids]),
        "attention_mask": torch.tensor([encoding.attention_mask]),
        "token_type_ids": torch.tensor([encoding.type_ids]),
    }
    with torch.no_grad():
        expected = reference.eval()(**inputs).logits
        actual = load_model(out)(**inputs)["logits"]
    assert actual.shape == (1, 1)
    assert torch.allclose(actual, expected, atol=1e-5)


def test_relevance_targets_from_named_labels_or_numbers(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    assert relevance_targets(path, ["yes", "no", "yes"], ["no", "yes"]) == [1.0, 0.0, 1.0]
    assert relevance_targets(path, ["0.25", "1", "0"], None) == [0.25, 1.0, 0.0]
    with pytest.raises(DataError, match="two --labels"):
        relevance_targets(path, ["a"], ["a", "b", "c"])
    with pytest.raises(DataError, match="unknown label 'maybe'"):
        relevance_targets(path, ["maybe"], ["no", "yes"])
    with pytest.raises(DataError, match="not a number"):
        relevance_targets(path, ["entailment"], None)
    with pytest.raises(DataError, match="outside"):
        relevance_targets(path, ["1.5"], None)


def test_collate_keeps_float_targets_as_float32() -> None:
    features = [{"input_ids": [2, 5, 3], "labels": [0.75]}, {"input_ids": [2, 3], "labels": [0.0]}]
    batch = collate(features, pad_token_id=0)
    assert batch["labels"].dtype == torch.float32 and batch["labels"].tolist() == [0.75, 0.0]
    assert collate([{"input_ids": [2, 3], "labels": [1]}], pad_token_id=0)["labels"].dtype == torch.long


def test_relevance_head_is_refused_for_other_tasks(tiny_base: Path, tmp_path: Path, capsys) -> None:
    data = pair_file(tmp_path / "pairs.tsv")
    argv = ["finetune", "--task", "token-classification", "--base", str(tiny_base), "--train", str(data),
            "--out", str(tmp_path / "o"), "--relevance-head"]  # fmt: skip
    assert main(argv) != 0
    assert "--relevance-head" in capsys.readouterr().err
