"""End-to-end CLI runs on a tiny base checkpoint built in the test; transformers is the oracle for the output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.training.conftest import TINY_CORPUS, written
from training.checkpoint import load_model
from training.cli import main
from training.tokenizer import load_tokenizer, save_tokenizer

transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
TINY = ["--batch-size", "4", "--max-length", "48", "--seed", "0"]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, tiny_wordpiece) -> Path:
    """A random transformers BertForPreTraining (hidden 32, 2 layers) saved with our tokenizer files."""
    folder = tmp_path_factory.mktemp("tiny-base")
    config = transformers.BertConfig(
        vocab_size=tiny_wordpiece.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.BertForPreTraining(config).save_pretrained(folder)
    save_tokenizer(tiny_wordpiece, folder)
    return folder


@pytest.fixture(scope="module")
def data_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("data")
    sentences = [s for line in TINY_CORPUS for s in line.split(". ")]
    files = {"sst": folder / "train.tsv", "sst_eval": folder / "dev.tsv"}
    rows = "".join(f"{s} \t{i % 2}\n" for i, s in enumerate(sentences * 2))
    files["sst"].write_text("sentence\tlabel\n" + rows)
    files["sst_eval"].write_text("sentence\tlabel\n" + rows[: rows.index("\n", 200) + 1])
    files["conll"] = folder / "train.txt"
    conll_lines = ["-DOCSTART- -X- -X- O", ""]
    for line in TINY_CORPUS:
        for i, word in enumerate(line.replace(".", " .").replace(",", " ,").split()):
            tag = "B-PER" if word[0].isupper() and i else "O"
            conll_lines.append(f"{word} NN O {tag}")
        conll_lines.append("")
    files["conll"].write_text("\n".join(conll_lines))
    files["squad"] = folder / "squad.json"
    articles = []
    for a, line in enumerate(TINY_CORPUS):
        answer = line.split()[1]
        qa = {
            "id": f"q{a}",
            "question": "What is the second word?",
            "answers": [{"text": answer, "answer_start": line.index(answer)}],
        }
        articles.append({"title": f"t{a}", "paragraphs": [{"context": line, "qas": [qa]}]})
    files["squad"].write_text(json.dumps({"version": "1.1", "data": articles}))
    files["text"] = folder / "text.txt"
    files["text"].write_text("\n".join(TINY_CORPUS * 2) + "\n")
    return files


TASK_CASES = {
    "text-classification": ("sst", ["--eval", "{sst_eval}"], "AutoModelForSequenceClassification", "logits"),
    "token-classification": ("conll", ["--eval", "{conll}"], "AutoModelForTokenClassification", "logits"),
    "question-answering": (
        "squad",
        ["--articles", "0:3", "--eval", "{squad}", "--eval-articles", "3:", "--doc-stride", "8"],
        "AutoModelForQuestionAnswering",
        "start_logits",
    ),
    "fill-mask": ("text", ["--eval", "{text}"], "AutoModelForMaskedLM", "logits"),
}


@pytest.mark.parametrize("task", list(TASK_CASES))
def test_finetuned_checkpoint_loads_in_transformers_with_equal_logits(
    task: str, tiny_base: Path, data_files: dict[str, Path], tmp_path: Path, capsys
) -> None:
    train_key, extra, auto_class, output_name = TASK_CASES[task]
    out = tmp_path / "out"
    extra = [arg.format(**{k: str(v) for k, v in data_files.items()}) for arg in extra]
    argv = ["finetune", "--task", task, "--base", str(tiny_base), "--train", str(data_files[train_key])]
    assert main([*argv, "--out", str(out), "--epochs", "2", "--lr", "1e-3", *TINY, *extra]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    metrics = json.loads((out / "metrics.json").read_text())
    assert summary["best"] == metrics["best"] and len(metrics["history"]) == 2

    reference, info = getattr(transformers, auto_class).from_pretrained(out, output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    ours = load_model(out)
    tokenizer = load_tokenizer(out)
    encodings = [tokenizer.encode("the quick brown fox", "where did it go?"), tokenizer.encode("a great movie")]
    width = max(len(e.ids) for e in encodings)
    inputs = {
        "input_ids": torch.tensor([e.ids + [0] * (width - len(e.ids)) for e in encodings]),
        "attention_mask": torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encodings]),
        "token_type_ids": torch.tensor([e.type_ids + [0] * (width - len(e.ids)) for e in encodings]),
    }
    with torch.no_grad():
        expected = getattr(reference.eval()(**inputs), output_name)
        actual = ours(**inputs)[output_name]
    assert torch.allclose(actual, expected, atol=1e-5)
    if task in ("text-classification", "token-classification"):
        assert set(reference.config.label2id) == ({"0", "1"} if task == "text-classification" else {"O", "B-PER"})


def test_pretrain_reports_both_losses_and_saves_a_pretraining_checkpoint(tmp_path: Path, capsys) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TINY_CORPUS * 4) + "\n")
    out = tmp_path / "pretrained"
    argv = ["pretrain", "--corpus", str(corpus), "--out", str(out), "--vocab-size", "150", "--layers", "1"]
    argv += ["--hidden", "32", "--heads", "4", "--intermediate", "64", "--steps", "6", "--eval-every", "3"]
    argv += ["--eval-fraction", "0.3", *TINY]
    assert main(argv) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert [h["step"] for h in metrics["history"]] == [3, 6]
    assert {"mlm_top1_accuracy", "perplexity", "nsp_accuracy", "nsp_loss"} <= set(metrics["best"])
    for entry in metrics["history"]:
        assert entry["train_loss"] == pytest.approx(entry["train_mlm_loss"] + entry["train_nsp_loss"], rel=1e-4)
    err = capsys.readouterr().err
    assert "mlm_loss=" in err and "nsp_loss=" in err
    _, info = transformers.BertForPreTraining.from_pretrained(out, output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    assert (
        transformers.AutoTokenizer.from_pretrained(out).tokenize("the fox")
        == load_tokenizer(out).encode("the fox", add_special_tokens=False).tokens
    )


def _bad_cases(tmp_path: Path, base: Path, data: dict[str, Path]) -> list[tuple[list[str], str]]:
    missing_column = written(tmp_path, "nolabel.tsv", "sentence\tscore\nfine\t1\n")
    unknown_label = written(tmp_path, "unknown.tsv", "sentence\tlabel\nfine\t7\n")
    empty = written(tmp_path, "empty.tsv", "")
    not_bert = tmp_path / "not-bert"
    not_bert.mkdir()
    (not_bert / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    small = written(
        tmp_path, "small.txt", "One sentence here. And a second one.\nAnother document. With two sentences.\n"
    )
    classify = ["finetune", "--task", "text-classification", "--base", str(base), "--out", str(tmp_path / "o")]
    return [
        ([*classify, "--train", str(missing_column)], str(missing_column)),
        ([*classify, "--train", str(data["sst"]), "--eval", str(unknown_label)], str(unknown_label)),
        ([*classify, "--train", str(empty)], str(empty)),
        ([*classify[:4], str(not_bert), *classify[5:], "--train", str(data["sst"])], str(not_bert)),
        (
            ["pretrain", "--corpus", str(small), "--out", str(tmp_path / "p"), "--steps", "1000", "--vocab-size", "60"],
            str(small),
        ),
    ]


def test_bad_input_stops_with_one_line_naming_the_file(tmp_path: Path, tiny_base: Path, data_files, capsys) -> None:
    expected_problems = ["no label column", "unknown label '7'", "empty", "model_type", "too small"]
    for (argv, named), problem in zip(_bad_cases(tmp_path, tiny_base, data_files), expected_problems, strict=True):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")
        assert named in err[0] and problem in err[0]
        assert "Traceback" not in err[0]
    assert not (tmp_path / "o" / "model.safetensors").exists()


def test_help_names_every_option_group(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["finetune", "--help"])
    shown = capsys.readouterr().out
    assert exited.value.code == 0
    assert all(option in shown for option in ("--task", "--doc-stride", "--articles", "--text-column", "--grad-accum"))


def test_help_points_to_the_data_formats_before_the_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    shown = capsys.readouterr().out
    head, options = shown.split("options:", 1)
    assert "'data formats' at the end" in head
    assert "\ndata formats:\n" in options and "CoNLL" in options.split("\ndata formats:\n", 1)[1]
    assert "--overwrite" in options


def test_help_gives_the_defaults_the_parser_uses(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    shown = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())  # the option list, lines joined
    for option, value in (("--epochs", "3.0"), ("--lr", "5e-05"), ("--batch-size", "32"), ("--max-length", "128")):
        found = re.search(re.escape(option) + r" [A-Z_]+ [^()]*\(default: ([^)]*)\)", shown)
        assert found is not None and found.group(1) == value, option


def test_bad_input_as_a_process_exits_non_zero_without_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    missing = tmp_path / "missing.tsv"
    run = subprocess.run(
        [sys.executable, "-m", "training", "finetune", "--task", "text-classification", "--base", str(tmp_path),
         "--train", str(missing), "--out", str(tmp_path / "o")],
        capture_output=True, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    assert run.returncode != 0 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path}")


@pytest.mark.skipif(
    shutil.which("torchrun") is None and not Path(sys.executable).with_name("torchrun").exists(), reason="no torchrun"
)
def test_two_process_torchrun_writes_one_checkpoint(
    tiny_base: Path, data_files: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "ddp"
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "training", "finetune"]
    command += ["--task", "text-classification", "--base", str(tiny_base), "--train", str(data_files["sst"])]
    command += ["--eval", str(data_files["sst_eval"]), "--out", str(out), "--epochs", "1", *TINY]
    run = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["world_size"] == 2
    assert len(metrics["history"]) == 1
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]
    assert run.stdout.count('"best"') == 1  # only rank 0 prints the summary


def test_random_init_keeps_the_configuration_but_not_the_weights(tmp_path: Path, tiny_base: Path, data_files) -> None:
    """--random-init: the same shape and tokenizer as --base, weights drawn afresh (seeded), so the from-scratch
    baseline and the pre-trained run differ only in where their weights start."""
    base_embeddings = load_model(tiny_base, "BertModel").state_dict()["embeddings.word_embeddings.weight"]
    embeddings = {}
    for name, extra in (("from-base", []), ("random", ["--random-init"]), ("random-again", ["--random-init"])):
        out = tmp_path / name
        argv = [
            "finetune",
            "--task",
            "text-classification",
            "--base",
            str(tiny_base),
            "--train",
            str(data_files["sst"]),
        ]
        argv += ["--out", str(out), "--max-steps", "1", "--lr", "1e-9", *TINY, *extra]
        assert main(argv) == 0
        model = load_model(out)
        assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2
        embeddings[name] = model.state_dict()["bert.embeddings.word_embeddings.weight"]
    assert max_abs(embeddings["from-base"] - base_embeddings) < 1e-6
    assert max_abs(embeddings["random"] - base_embeddings) > 1e-2
    assert torch.equal(embeddings["random"], embeddings["random-again"])
    assert load_tokenizer(tmp_path / "random").get_vocab() == load_tokenizer(tiny_base).get_vocab()


def max_abs(tensor: torch.Tensor) -> float:
    return float(tensor.abs().max())


def test_pretrain_eval_scores_nsp_and_mlm_as_transformers_does(tmp_path: Path, tiny_base: Path, capsys) -> None:
    """pretrain-eval's NSP accuracy and MLM loss on a corpus equal transformers' BertForPreTraining on the same
    pairs and masks; --random-init scores the configuration's fresh weights on the very same positions, whatever
    weights the folder holds."""
    from training.pretrain_data import MlmCollator, corpus_to_nsp_features

    corpus = tmp_path / "heldout.txt"
    corpus.write_text("\n".join(TINY_CORPUS * 3) + "\n")
    other_weights = tmp_path / "other-weights"
    shutil.copytree(tiny_base, other_weights)
    torch.manual_seed(1)
    transformers.BertForPreTraining(transformers.BertConfig.from_pretrained(tiny_base)).save_pretrained(other_weights)
    reports = {}
    for name, folder, extra in (
        ("checkpoint", tiny_base, []),
        ("other", other_weights, []),
        ("random", tiny_base, ["--random-init"]),
        ("other random", other_weights, ["--random-init"]),
    ):
        argv = ["pretrain-eval", "--checkpoint", str(folder), "--corpus", str(corpus), "--max-length", "48"]
        assert main([*argv, "--seed", "0", "--eval-batch-size", "8", *extra]) == 0
        reports[name] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    tokenizer = load_tokenizer(tiny_base)
    features = corpus_to_nsp_features(corpus, tokenizer, 48, 0)
    collator = MlmCollator(tokenizer, pad_token_id=0, seed=1)
    reference = transformers.BertForPreTraining.from_pretrained(tiny_base).eval()
    correct, masked_loss, masked = 0, 0.0, 0
    with torch.no_grad():
        for start in range(0, len(features), 8):
            batch = collator(features[start : start + 8])
            out = reference(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
            labels = batch["labels"]
            masked_loss += float(
                torch.nn.functional.cross_entropy(
                    out.prediction_logits[labels != -100], labels[labels != -100], reduction="sum"
                )
            )
            masked += int((labels != -100).sum())
    checkpoint = reports["checkpoint"]
    assert checkpoint["pairs"] == len(features) > 0
    assert checkpoint["nsp_accuracy"] == pytest.approx(correct / len(features))
    assert checkpoint["mlm_loss"] == pytest.approx(masked_loss / masked, rel=1e-4)
    assert reports["other"]["mlm_loss"] != checkpoint["mlm_loss"]
    assert reports["random"]["pairs"] == checkpoint["pairs"]
    assert reports["random"] == reports["other random"]
    assert reports["random"]["mlm_loss"] != checkpoint["mlm_loss"]
