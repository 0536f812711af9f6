"""The demo builder's generated data and command lines, checked against the training and export CLIs' own readers."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import demo_data
import demo_models
import pytest

from model_export.__main__ import build_parser as export_parser
from tests.service.tiny_models import build_tiny_models, cache_key
from training.cli import build_parser as training_parser
from training.data import read_classification_rows, read_tagged_sentences, read_text_lines
from training.squad import read_squad

ENTITY_KINDS = {"PER", "LOC", "ORG", "MISC"}


def write(name: str, folder: Path, count: int, seed: int = 0) -> Path:
    spec = next(spec for spec in demo_models.DEMOS if spec.name == name)
    path = folder / spec.data_file
    demo_data.WRITERS[name](path, random.Random(seed), count)
    return path


def test_sentiment_rows_are_balanced_varied_and_readable(tmp_path: Path) -> None:
    rows = read_classification_rows(write("sentiment", tmp_path, 400))
    assert Counter(row.label for row in rows) == {"POSITIVE": 200, "NEGATIVE": 200}
    assert len({row.text for row in rows}) > 300
    positive_words = set(demo_data.POSITIVE_WORDS)
    for row in rows:
        words = set(row.text.lower().replace(",", " ").replace(".", " ").replace("!", " ").split())
        if words & positive_words and words & set(demo_data.NEGATIVE_WORDS):
            pytest.fail(f"mixed sentiment words in {row.text!r}")


def test_ner_sentences_are_valid_iob2_with_all_four_entity_kinds(tmp_path: Path) -> None:
    sentences = read_tagged_sentences(write("ner", tmp_path, 300))
    assert len(sentences) == 300
    kinds_seen = set()
    for sentence in sentences:
        previous = "O"
        for token, tag in zip(sentence.tokens, sentence.tags, strict=True):
            if tag.startswith("I-"):
                assert previous[2:] == tag[2:], f"{tag} after {previous} in {sentence.tokens}"
            if tag != "O":
                kinds_seen.add(tag[2:])
            if tag == "B-LOC":
                assert any(city.split()[0] == token for city in demo_data.CITIES)
            previous = tag
    assert kinds_seen == ENTITY_KINDS


def test_squad_answers_are_whole_word_spans_of_their_contexts(tmp_path: Path) -> None:
    examples = read_squad(write("qa", tmp_path, 200))
    assert len(examples) == 600
    for example in examples:
        (answer,), (start,) = example.answer_texts, example.answer_starts
        assert example.context[start : start + len(answer)] == answer
        before = example.context[start - 1] if start else " "
        after = example.context[start + len(answer) : start + len(answer) + 1] or " "
        assert not before.isalnum() and not after.isalnum(), (answer, example.context)
    assert len({example.question.split()[0] for example in examples}) >= 3


def test_text_lines_cover_the_fill_mask_example_frame(tmp_path: Path) -> None:
    lines = read_text_lines(write("fill-mask", tmp_path, 500))
    assert len(lines) == 500
    assert sum(" is the capital of " in line for line in lines) > 20


@pytest.mark.parametrize("name", sorted(demo_data.WRITERS))
def test_data_depends_only_on_the_seed(tmp_path: Path, name: str) -> None:
    first, second, other = (tmp_path / "a", tmp_path / "b", tmp_path / "c")
    for folder in (first, second, other):
        folder.mkdir()
    paths = [write(name, first, 50), write(name, second, 50), write(name, other, 50, seed=1)]
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


@pytest.mark.parametrize("spec", demo_models.DEMOS, ids=lambda spec: spec.name)
def test_command_lines_parse_with_the_training_and_export_clis(spec: demo_models.DemoSpec) -> None:
    training = training_parser().parse_args(
        ["finetune", "--task", spec.task, "--base", "b", "--train", "t", "--out", "o", *spec.finetune_args]
    )
    assert training.task == spec.task and training.max_steps is not None
    exported = export_parser().parse_args(["ckpt", "out", "--task", spec.task, "--quantize", "none", *spec.export_args])
    assert exported.task == spec.task


def test_demo_names_match_the_readme_examples() -> None:
    from demo_examples import EXAMPLES

    assert [example.model for example in EXAMPLES] == [spec.name for spec in demo_models.DEMOS]
    assert {example.body["model"] for example in EXAMPLES} == set(demo_data.WRITERS)


def test_finished_bundles_are_skipped(
    tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = Path(pytestconfig.cache.mkdir("bertserve-tiny-models"))
    tiny = build_tiny_models(cache / cache_key())
    task_of = {spec.name: spec.task for spec in demo_models.DEMOS}
    for name, task in task_of.items():
        shutil.copytree(tiny[task].bundle, tmp_path / name)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"nothing should run when every bundle is built: {args}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert demo_models.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "qa" / "bundle.json").unlink()
    assert not demo_models.is_built(tmp_path / "qa")
    assert demo_models.is_built(tmp_path / "ner")


def test_a_failing_step_names_itself_and_shows_the_log_tail(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('the reason it broke'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"(?s)demo x: training failed \(exit 3\).*the reason it broke"):
        demo_models.run_step("demo x: training", command, tmp_path / "train.log", echo=False)


def test_step_output_goes_to_its_log_and_to_the_console(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    command = [sys.executable, "-c", "print('step one'); print('step two')"]
    wall, cpu = demo_models.run_step("demo x: export", command, tmp_path / "export.log", echo=True)
    assert (tmp_path / "export.log").read_text().splitlines() == ["step one", "step two"]
    assert "step one\nstep two" in capfd.readouterr().out
    assert wall > 0 and cpu >= 0
