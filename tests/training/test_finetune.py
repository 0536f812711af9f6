"""Fine-tuning reads the task table (architecture, metric, per-token outputs) and pads with the tokenizer's pad id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models

from contract.tasks import FINETUNE_TASKS, task_spec
from tests.training.conftest import TINY_BERT_CONFIG, written
from training.checkpoint import CheckpointError
from training.cli import build_parser
from training.data import IGNORE_INDEX
from training.finetune import TASK_BUILDERS, FinetuneOptions, TaskContext, _predict, finetune
from training.model import ARCHITECTURES, BertConfig
from training.train import Runtime

# The pad id the tests pad with: not 0, so a collate that fell back to a literal 0 would show.
PAD_ID = 7


def test_every_fine_tuning_task_has_a_builder_and_a_cli_choice() -> None:
    assert set(TASK_BUILDERS) == set(FINETUNE_TASKS)
    parser = build_parser()
    for task in FINETUNE_TASKS:
        args = parser.parse_args(["finetune", "--task", task, "--base", "b", "--train", "t", "--out", "o"])
        assert args.task == task and task_spec(task).primary_metric is not None
    with pytest.raises(SystemExit):
        parser.parse_args(["finetune", "--task", "feature-extraction", "--base", "b", "--train", "t", "--out", "o"])


@pytest.mark.parametrize(
    ("task", "num_labels"), [("text-classification", 3), ("token-classification", 5), ("question-answering", 2)]
)
def test_predict_cuts_exactly_the_tasks_per_token_outputs(
    tiny_wordpiece: Tokenizer, task: str, num_labels: int
) -> None:
    spec = task_spec(task)
    torch.manual_seed(0)
    model = ARCHITECTURES[spec.architecture](BertConfig(**TINY_BERT_CONFIG, num_labels=num_labels)).eval()
    features = [
        {"input_ids": [2, 10, 11, 12, 13, 3], "token_type_ids": [0, 0, 0, 1, 1, 1]},
        {"input_ids": [2, 14, 3], "token_type_ids": [0, 0, 0]},
        {"input_ids": [2, 15, 16, 3], "token_type_ids": [0, 0, 1, 1]},
    ]
    context = TaskContext(tiny_wordpiece, PAD_ID, torch.device("cpu"))
    results = _predict(model, task, features, batch_size=2, context=context)
    assert len(results) == len(features)
    for feature, result in zip(features, results, strict=True):
        assert set(result) == set(spec.outputs)
        ids, types = torch.tensor([feature["input_ids"]]), torch.tensor([feature["token_type_ids"]])
        with torch.no_grad():
            alone = model(ids, token_type_ids=types)
        for name in spec.outputs:
            expected = alone[name][0]  # one unpadded row: per-token outputs are exactly the feature's length
            if spec.is_token_level(name):
                assert result[name].shape[0] == len(feature["input_ids"]), name
            assert result[name].shape == expected.shape, name
            torch.testing.assert_close(result[name], expected, atol=1e-5, rtol=1e-5)


def options_for(task: str, train_file: Path, tmp_path: Path) -> FinetuneOptions:
    return FinetuneOptions(task=task, base=tmp_path / "base", train_file=train_file, out=tmp_path / "out")


def test_task_collators_pad_with_the_tokenizers_pad_id(tiny_wordpiece: Tokenizer, tmp_path: Path) -> None:
    context = TaskContext(tiny_wordpiece, PAD_ID, torch.device("cpu"))
    sst = written(
        tmp_path, "train.tsv", "sentence\tlabel\nthe quick brown fox jumps over the lazy dog\t1\na great movie\t0\n"
    )
    conll = written(tmp_path, "train.txt", "Peter B-PER\nBlackburn I-PER\nvisited O\nBrussels B-LOC\n\nthe O\nfox O\n")
    lines = written(tmp_path, "train-lines.txt", "the quick brown fox jumps over the lazy dog.\na great movie.\n")
    for task, train_file in (("text-classification", sst), ("token-classification", conll), ("fill-mask", lines)):
        data = TASK_BUILDERS[task](options_for(task, train_file, tmp_path), context)
        batch = data.collate_fn(data.train_features[:2])
        lengths = [len(feature["input_ids"]) for feature in data.train_features[:2]]
        assert lengths[0] != lengths[1], task
        short = lengths.index(min(lengths))
        assert batch["input_ids"][short, min(lengths) :].tolist() == [PAD_ID] * (max(lengths) - min(lengths)), task
        assert batch["attention_mask"][short].tolist() == [1] * min(lengths) + [0] * (max(lengths) - min(lengths))
        if "labels" in batch and batch["labels"].dim() == 2:
            assert (batch["labels"][short, min(lengths) :] == IGNORE_INDEX).all(), task


def test_a_base_whose_tokenizer_lacks_its_pad_token_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({"model_type": "bert", **TINY_BERT_CONFIG}))
    vocab = {token: index for index, token in enumerate(["[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "fox"])}
    Tokenizer(models.WordPiece(vocab, unk_token="[UNK]")).save(str(base / "tokenizer.json"))
    train_file = tmp_path / "train.tsv"
    train_file.write_text("sentence\tlabel\nthe fox\t1\n")
    options = FinetuneOptions(task="text-classification", base=base, train_file=train_file, out=tmp_path / "out")
    with pytest.raises(CheckpointError, match=r"\[PAD\]") as raised:
        finetune(options, Runtime())
    assert str(base) in str(raised.value)
    assert not (tmp_path / "out").exists()
