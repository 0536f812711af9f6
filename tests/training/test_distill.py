"""Distillation from an ensemble of fine-tunes: the ensemble's maths, the targets' padding, the loss, and the CLI
(transformers' models are the oracle for what the ensemble scores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.training.test_cli import TINY, data_files, tiny_base  # noqa: F401  (fixtures)
from training.checkpoint import load_model
from training.cli import main
from training.data import DataError
from training.distill import (
    MASKED_LOGIT,
    DistillOptions,
    Ensemble,
    distillation_collate,
    distilled_outputs,
    soft_loss,
)

transformers = pytest.importorskip("transformers")


class Fixed(torch.nn.Module):
    def __init__(self, start: torch.Tensor, logits: torch.Tensor):
        super().__init__()
        self.start, self.logits = start, logits

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"start_logits": self.start, "logits": self.logits}


def test_the_ensemble_is_the_mean_log_probability_with_padding_left_out() -> None:
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    first = Fixed(torch.tensor([[1.0, 2.0, 3.0, 50.0], [0.0, 0.0, 9.0, 9.0]]), torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
    second = Fixed(torch.tensor([[3.0, 2.0, 1.0, 50.0], [1.0, 0.0, 9.0, 9.0]]), torch.tensor([[1.0, 0.0], [0.0, 4.0]]))
    averaged = Ensemble([first, second], ("start_logits", "logits"))(attention_mask=mask)
    row = (torch.tensor([1.0, 2.0, 3.0]).log_softmax(-1) + torch.tensor([3.0, 2.0, 1.0]).log_softmax(-1)) / 2
    assert torch.allclose(averaged["start_logits"][0, :3], row)
    assert averaged["start_logits"][0, 3] < -1e3 and averaged["start_logits"][1, 2:].max() < -1e3
    logits = (torch.tensor([0.0, 1.0]).log_softmax(-1) + torch.tensor([1.0, 0.0]).log_softmax(-1)) / 2
    assert torch.allclose(averaged["logits"][0], logits)  # classification logits have no positions to mask


def test_soft_loss_is_zero_only_where_the_student_matches_the_teacher() -> None:
    teacher = torch.tensor([[2.0, 0.5, -1.0]]).log_softmax(-1)
    assert float(soft_loss(teacher + 7.0, teacher, 2.0)) == pytest.approx(0.0, abs=1e-6)  # a shift is no change
    assert float(soft_loss(torch.tensor([[-1.0, 0.5, 2.0]]), teacher, 2.0)) > 0.1


def test_teacher_targets_are_padded_to_the_batch_with_no_probability() -> None:
    def plain(features):  # type: ignore[no-untyped-def]
        assert all("teacher_start_logits" not in f for f in features)
        return {"input_ids": torch.zeros(len(features), 3, dtype=torch.long)}

    collate = distillation_collate(plain, ("start_logits",))
    batch = collate([{"input_ids": [1, 2, 3], "teacher_start_logits": [-1.0, -2.0, -3.0]},
                     {"input_ids": [1, 2], "teacher_start_logits": [-0.5, -0.75]}])  # fmt: skip
    assert batch["teacher_start_logits"].tolist() == [[-1.0, -2.0, -3.0], [-0.5, -0.75, MASKED_LOGIT]]


def test_only_tasks_with_a_distribution_to_distil_are_accepted() -> None:
    assert distilled_outputs("question-answering") == ("start_logits", "end_logits")
    for task, relevance in (("token-classification", False), ("fill-mask", False), ("text-classification", True)):
        with pytest.raises(DataError):
            distilled_outputs(task, relevance)
    with pytest.raises(DataError):
        DistillOptions((Path("t"),), alpha=1.5)


def _finetune(base: Path, data: dict[str, Path], out: Path, *extra: str) -> dict:
    argv = ["finetune", "--task", "text-classification", "--base", str(base), "--train", str(data["sst"])]
    argv += ["--eval", str(data["sst_eval"]), "--out", str(out), "--epochs", "2", "--lr", "1e-3", *TINY, *extra]
    assert main(argv) == 0  # a --seed in extra comes after TINY's, so it is the one argparse keeps
    return json.loads((out / "metrics.json").read_text())


def test_a_student_learns_from_the_ensemble_and_records_what_it_scores(
    tiny_base: Path,  # noqa: F811
    data_files: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    teachers = [tmp_path / f"teacher{seed}" for seed in (1, 2)]
    for seed, folder in zip((1, 2), teachers, strict=True):
        _finetune(tiny_base, data_files, folder, "--seed", str(seed))
    plain = _finetune(tiny_base, data_files, tmp_path / "plain")
    teacher_args = [arg for folder in teachers for arg in ("--teacher", str(folder))]
    student = _finetune(tiny_base, data_files, tmp_path / "student", *teacher_args)

    distillation = student["distillation"]
    assert distillation["teachers"] == [str(folder) for folder in teachers] and distillation["alpha"] == 0.5
    # The ensemble's accuracy, recomputed with transformers' models and the dev rows.
    rows = [line.split("\t") for line in data_files["sst_eval"].read_text().splitlines()[1:]]
    from training.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tiny_base)
    log_probs = torch.zeros(len(rows), 2)
    for folder in teachers:
        model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
        for index, (sentence, _) in enumerate(rows):
            encoding = tokenizer.encode(sentence)
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([encoding.ids]), token_type_ids=torch.tensor([encoding.type_ids]))
            log_probs[index] += logits.logits[0].log_softmax(-1) / len(teachers)
    labels = [model.config.label2id[label.strip()] for _, label in rows]
    expected = float((log_probs.argmax(-1) == torch.tensor(labels)).float().mean())
    assert distillation["ensemble_eval"]["accuracy"] == pytest.approx(expected)
    history = student["history"]
    assert all(entry["train_soft_loss"] > 0 and entry["train_hard_loss"] > 0 for entry in history)
    assert "train_soft_loss" not in plain["history"][0]
    trained, reference = load_model(tmp_path / "student"), load_model(tmp_path / "plain")
    differs = any(
        not torch.equal(a, b)
        for a, b in zip(trained.state_dict().values(), reference.state_dict().values(), strict=True)
    )
    assert differs, "the teachers' targets changed nothing"


def test_alpha_one_is_the_plain_recipe_exactly(
    tiny_base: Path,  # noqa: F811
    data_files: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    _finetune(tiny_base, data_files, tmp_path / "teacher", "--seed", "3")
    _finetune(tiny_base, data_files, tmp_path / "plain")
    _finetune(tiny_base, data_files, tmp_path / "hard", "--teacher", str(tmp_path / "teacher"), "--distill-alpha", "1")
    trained, reference = load_model(tmp_path / "hard"), load_model(tmp_path / "plain")
    for (name, a), b in zip(trained.state_dict().items(), reference.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


def test_a_teacher_with_other_labels_is_refused(
    tiny_base: Path,  # noqa: F811
    data_files: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    capsys,
) -> None:
    _finetune(tiny_base, data_files, tmp_path / "teacher")
    argv = ["finetune", "--task", "text-classification", "--base", str(tiny_base), "--train", str(data_files["sst"])]
    argv += ["--out", str(tmp_path / "s"), "--labels", "1,0", "--teacher", str(tmp_path / "teacher"), *TINY]
    assert main(argv) == 2
    assert "labels" in capsys.readouterr().err


def test_a_question_answering_student_distils_start_and_end_over_positions(
    tiny_base: Path,  # noqa: F811
    data_files: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    squad = ["--task", "question-answering", "--base", str(tiny_base), "--train", str(data_files["squad"])]
    squad += ["--articles", "0:3", "--eval", str(data_files["squad"]), "--eval-articles", "3:", "--doc-stride", "8"]
    assert main(["finetune", *squad, "--out", str(tmp_path / "teacher"), "--epochs", "1", *TINY]) == 0
    student = ["--out", str(tmp_path / "student"), "--epochs", "1", "--teacher", str(tmp_path / "teacher")]
    assert main(["finetune", *squad, *student, "--distill-temperature", "1", *TINY]) == 0
    metrics = json.loads((tmp_path / "student" / "metrics.json").read_text())
    ensemble = metrics["distillation"]["ensemble_eval"]
    teacher = json.loads((tmp_path / "teacher" / "metrics.json").read_text())["best"]
    assert ensemble["f1"] == pytest.approx(teacher["f1"]) and ensemble["exact_match"] == teacher["exact_match"]
    assert metrics["history"][-1]["train_soft_loss"] > 0
