"""Fine-tuning other encoder families through transformers' modules: a tiny random checkpoint of each learns a
keyword task past the majority baseline, and the saved checkpoint exports."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.model_export.conftest import make_transformers_checkpoint
from training.checkpoint import CheckpointError
from training.families import LORA_TARGETS, TRANSFORMERS_FAMILIES, FamilyModel, load_family_model, model_type_of
from training.finetune import FinetuneOptions, finetune
from training.train import Runtime, TrainingArguments

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

POSITIVE = ["wonderful", "beautiful", "brilliant", "excellent", "amazing", "great", "good"]
NEGATIVE = ["terrible", "awful", "boring", "poor", "worst", "dull", "bad"]
FILLER = ["the", "a", "movie", "film", "story", "actor", "plot", "scene", "music", "book", "play", "city", "house"]


def write_keyword_task(path: Path, rows: int, seed: int) -> Path:
    """Sentences of filler words with one sentiment word: its side is the label (learnable, balanced)."""
    generator = random.Random(seed)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["sentence", "label"])
        for _ in range(rows):
            label = generator.choice(["positive", "negative"])
            words = [generator.choice(FILLER) for _ in range(generator.randint(3, 7))]
            words.insert(
                generator.randrange(len(words) + 1), generator.choice(POSITIVE if label == "positive" else NEGATIVE)
            )
            writer.writerow([" ".join(words), label])
    return path


def keyword_options(base: Path, root: Path, out: str, **training: object) -> FinetuneOptions:
    arguments = {"epochs": 8.0, "batch_size": 16, "learning_rate": 2e-3, "warmup_ratio": 0.1, "seed": 0, **training}
    return FinetuneOptions(
        task="text-classification",
        base=base,
        train_file=write_keyword_task(root / "train.csv", 320, seed=1),
        eval_file=write_keyword_task(root / "eval.csv", 100, seed=2),
        out=root / out,
        max_length=32,
        training=TrainingArguments(**arguments),  # type: ignore[arg-type]
    )


def majority_share(path: Path) -> float:
    with path.open() as handle:
        labels = [row["label"] for row in csv.DictReader(handle)]
    return max(labels.count(label) for label in set(labels)) / len(labels)


@pytest.mark.parametrize("model_type", TRANSFORMERS_FAMILIES)
def test_a_family_checkpoint_fine_tunes_past_the_majority_baseline_and_exports(tmp_path: Path, model_type: str) -> None:
    from model_export.export import export_bundle
    from model_export.family_checkpoints import build_family_checkpoint

    base = build_family_checkpoint(model_type, "feature-extraction", tmp_path / "base")
    options = keyword_options(base, tmp_path, "tuned")
    report = finetune(options, Runtime())
    baseline = majority_share(options.eval_file)  # type: ignore[arg-type]
    assert report["best"]["accuracy"] > baseline + 0.2, (report["best"], baseline)
    config = json.loads((options.out / "config.json").read_text())
    assert config["model_type"] == model_type and config["id2label"] == {"0": "negative", "1": "positive"}
    assert (options.out / "tokenizer.json").is_file() and (options.out / "model.safetensors").is_file()
    bundle = export_bundle(options.out, tmp_path / "bundle", task="text-classification", optimize=False)
    assert bundle.spec.id2label == {0: "negative", 1: "positive"}


@pytest.mark.parametrize("model_type", TRANSFORMERS_FAMILIES)
def test_lora_with_the_family_defaults_trains_adapters_and_head_only_and_the_merge_exports(
    tmp_path: Path, model_type: str
) -> None:
    """LoRA on the family's default targets (``LORA_TARGETS``) runs and lowers the training loss; the merged
    checkpoint differs from the base only in the targeted weights (the rest stayed frozen), and exports."""
    from model_export.export import export_bundle
    from model_export.family_checkpoints import build_family_checkpoint
    from training.lora import LoraOptions

    base = build_family_checkpoint(model_type, "feature-extraction", tmp_path / "base")
    options = dataclasses.replace(
        keyword_options(base, tmp_path, "tuned", epochs=4.0), lora=LoraOptions(rank=8, merge=True)
    )
    history = finetune(options, Runtime())["history"]
    assert history[-1]["train_loss"] < history[0]["train_loss"], (model_type, history)
    adapter = json.loads((options.out / "adapter" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == set(LORA_TARGETS[model_type])
    before, after = load_file(base / "model.safetensors"), load_file(options.out / "model.safetensors")
    changed = {}  # each encoder weight of the base: whether the merged fine-tune changed it
    for name, tensor in before.items():
        kept = [value for key, value in after.items() if key == name or key.endswith(f".{name}")]
        if kept:  # (a task model may drop a part of the base: RoBERTa's classifier has no pooler)
            (merged,) = kept
            changed[name] = not torch.equal(tensor, merged)
    targeted = {name for name in changed if name.rsplit(".", 2)[-2] in LORA_TARGETS[model_type]}
    assert targeted and all(changed[name] for name in targeted if name.endswith(".weight"))
    assert not any(changed[name] for name in changed if name not in targeted)  # the rest stayed frozen
    export_bundle(options.out, tmp_path / "bundle", task="text-classification", optimize=False)


TORCHRUN = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))


@pytest.mark.skipif(not Path(TORCHRUN).exists(), reason="no torchrun")
@pytest.mark.parametrize("model_type", ["roberta", "modernbert"])
def test_a_family_fine_tunes_data_parallel_under_torchrun(tmp_path: Path, model_type: str) -> None:
    """Two torchrun processes (gloo) train one family checkpoint as the single-process run does: one checkpoint,
    one summary, the held-out accuracy past the majority baseline."""
    from model_export.family_checkpoints import build_family_checkpoint

    base = build_family_checkpoint(model_type, "feature-extraction", tmp_path / "base")
    train, held_out = (
        write_keyword_task(tmp_path / "train.csv", 320, 1),
        write_keyword_task(tmp_path / "eval.csv", 100, 2),
    )
    out = tmp_path / "ddp"
    command = [TORCHRUN, "--standalone", "--nproc_per_node", "2", "-m", "training", "finetune"]
    command += ["--task", "text-classification", "--base", str(base), "--train", str(train), "--eval", str(held_out)]
    command += ["--out", str(out), "--epochs", "8", "--batch-size", "8", "--lr", "2e-3", "--warmup-ratio", "0.1"]
    command += ["--max-length", "32", "--seed", "0"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["world_size"] == 2 and len(metrics["history"]) == 8
    assert metrics["best"]["accuracy"] > majority_share(held_out) + 0.2, metrics["best"]
    assert json.loads((out / "config.json").read_text())["model_type"] == model_type
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]
    assert run.stdout.count('"best"') == 1  # only rank 0 prints the summary


def test_the_family_model_feeds_segments_only_to_families_that_have_them(tmp_path: Path) -> None:
    from model_export.family_checkpoints import build_family_checkpoint

    roberta = load_family_model(
        build_family_checkpoint("roberta", "feature-extraction", tmp_path / "r"), "text-classification",
        id2label={0: "a", 1: "b"},
    )  # fmt: skip
    assert isinstance(roberta, FamilyModel) and not roberta.takes_segments  # type_vocab_size 1
    ids = torch.tensor([[0, 10, 11, 2, 2, 12, 2]])
    with torch.no_grad():
        plain = roberta(ids, torch.ones_like(ids))["logits"]
        with_pairs = roberta(ids, torch.ones_like(ids), torch.tensor([[0, 0, 0, 0, 1, 1, 1]]))["logits"]
    torch.testing.assert_close(plain, with_pairs)
    electra = load_family_model(
        build_family_checkpoint("electra", "feature-extraction", tmp_path / "e"), "text-classification",
        id2label={0: "a", 1: "b"},
    )  # fmt: skip
    assert electra.takes_segments


def test_every_family_has_lora_targets_its_model_really_names(tmp_path: Path) -> None:
    from model_export.family_checkpoints import KITS, build_family_checkpoint

    assert set(LORA_TARGETS) == set(KITS)
    for model_type, targets in LORA_TARGETS.items():
        folder = build_family_checkpoint(model_type, "feature-extraction", tmp_path / model_type)
        assert model_type_of(folder) == model_type
        model = load_family_model(folder, "text-classification", id2label={0: "a", 1: "b"}).model
        names = {
            name.rpartition(".")[2] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)
        }
        assert set(targets) <= names, (model_type, sorted(names))


def test_a_family_fine_tuning_does_not_know_is_refused_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "gpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(CheckpointError, match="fine-tuning accepts bert, distilbert"):
        model_type_of(folder)
    bert = make_transformers_checkpoint("text-classification", tmp_path / "bert")
    assert model_type_of(bert) == "bert"


def write_task_files(root: Path) -> dict[str, Path]:
    """The keyword sentences as each task's data: the sentiment word is the entity, the answer and a masked word."""
    with write_keyword_task(root / "rows.csv", 160, seed=3).open() as handle:
        rows = list(csv.DictReader(handle))
    tagged = root / "tagged.jsonl"
    with tagged.open("w") as handle:
        for row in rows:
            tokens = row["sentence"].split()
            tags = ["B-POS" if t in POSITIVE else "B-NEG" if t in NEGATIVE else "O" for t in tokens]
            handle.write(json.dumps({"tokens": tokens, "tags": tags}) + "\n")
    articles = []
    for index, row in enumerate(rows):
        answer = next(t for t in row["sentence"].split() if t in POSITIVE + NEGATIVE)
        start = f" {row['sentence']} ".index(f" {answer} ")
        answers = [{"text": answer, "answer_start": start}]
        question = {"id": f"q{index}", "question": "which word is the feeling?", "answers": answers}
        articles.append({"title": f"t{index}", "paragraphs": [{"context": row["sentence"], "qas": [question]}]})
    squad = root / "squad.json"
    squad.write_text(json.dumps({"version": "1.1", "data": articles}))
    text = root / "text.txt"
    text.write_text("\n".join(row["sentence"] for row in rows) + "\n")
    return {"token-classification": tagged, "question-answering": squad, "fill-mask": text}


@pytest.mark.parametrize("model_type", ["roberta", "deberta-v2"])
@pytest.mark.parametrize("task", ["token-classification", "question-answering", "fill-mask"])
def test_every_task_fine_tunes_a_family_checkpoint_that_exports(tmp_path: Path, model_type: str, task: str) -> None:
    from model_export.export import export_bundle
    from model_export.family_checkpoints import build_family_checkpoint
    from training.cli import main

    base = build_family_checkpoint(model_type, "feature-extraction", tmp_path / "base")
    data = write_task_files(tmp_path)[task]
    extra = (
        ["--articles", "0:120", "--eval-articles", "120:", "--doc-stride", "8"] if task == "question-answering" else []
    )
    argv = ["finetune", "--task", task, "--base", str(base), "--train", str(data), "--eval", str(data)]
    argv += [
        "--out",
        str(tmp_path / "out"),
        "--epochs",
        "2",
        "--lr",
        "1e-3",
        "--batch-size",
        "16",
        "--max-length",
        "32",
    ]
    assert main([*argv, *extra]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert len(metrics["history"]) == 2 and metrics["best"]
    if task == "fill-mask":  # the probes: byte-level BPE's (RoBERTa's) too, each word as the line spells it
        assert math.isfinite(metrics["best"]["mlm_loss"])  # NaN: no mask was scored
    export_bundle(tmp_path / "out", tmp_path / "bundle", task=task, optimize=False)
