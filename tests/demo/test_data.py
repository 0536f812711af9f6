"""The demo builder's generated data and command lines, checked against the training and export CLIs' own readers."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from contract.word_decoding import default_stride
from demo import build, check, data, heldout, heldout_probes, qa_paragraphs, vocabulary
from demo.examples import EXAMPLES
from model_export.__main__ import build_parser as export_parser
from tests.minilm import minilm_tokenizer
from tests.service.tiny_models import build_tiny_models, cache_key
from training.cli import build_parser as training_parser
from training.data import read_classification_rows, read_tagged_sentences, read_text_lines
from training.squad import read_squad

ENTITY_KINDS = {"PER", "LOC", "ORG", "MISC"}
# Everyday words the NER demo must leave O in long texts (the failure demo/check.py guards against).
COMMON_WORDS = {"music", "city", "river", "people", "Monday", "Sunday", "January", "May", "August", "bank", "company"}
# Every name the training data draws (sentiment and fill-mask use subsets: FIRST_NAMES, CITIES, ...).
TRAINING_NAMES = vocabulary.TRAINING_POOLS


def spec_named(name: str) -> build.DemoSpec:
    return next(spec for spec in build.DEMOS if spec.name == name)


def option(args: tuple[str, ...], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.fixture(scope="module")
def encoder_tokenizer() -> Tokenizer:
    """The MiniLM encoder's tokenizer, as training and the exported bundles use it (no padding/truncation)."""
    return minilm_tokenizer()


def write(name: str, folder: Path, count: int, seed: int = 0) -> Path:
    path = folder / spec_named(name).data_file
    data.WRITERS[name](path, random.Random(seed), count)
    return path


def test_sentiment_rows_are_balanced_varied_and_readable(tmp_path: Path) -> None:
    rows = read_classification_rows(write("sentiment", tmp_path, 400))
    assert Counter(row.label for row in rows) == {"POSITIVE": 200, "NEGATIVE": 200}
    assert len({row.text for row in rows}) > 300
    positive_words = set(vocabulary.POSITIVE_WORDS)
    for row in rows:
        words = set(row.text.lower().replace(",", " ").replace(".", " ").replace("!", " ").split())
        if words & positive_words and words & set(vocabulary.NEGATIVE_WORDS):
            pytest.fail(f"mixed sentiment words in {row.text!r}")


def test_ner_blocks_are_valid_iob2_with_all_four_entity_kinds(tmp_path: Path) -> None:
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
                assert any(city.split()[0] == token for city in vocabulary.ENTITY_CITIES)
            previous = tag
    assert kinds_seen == ENTITY_KINDS


def test_ner_blocks_are_mostly_filler_passages_of_about_a_window(tmp_path: Path, encoder_tokenizer: Tokenizer) -> None:
    sentences = read_tagged_sentences(write("ner", tmp_path, 400))
    no_entity = [s for s in sentences if set(s.tags) == {"O"}]
    passages = [s for s in sentences if len(s.tokens) >= 40]
    assert len(no_entity) >= 0.15 * len(sentences), "blocks without any entity teach that long stretches are O"
    assert len(passages) >= 0.5 * len(sentences)
    tags = [tag for s in sentences for tag in s.tags]
    assert tags.count("O") >= 0.85 * len(tags)
    common_tags = {tag for s in sentences for token, tag in zip(s.tokens, s.tags, strict=True) if token in COMMON_WORDS}
    seen = {token for s in sentences for token in s.tokens}
    assert common_tags == {"O"} and seen >= COMMON_WORDS
    lengths = [len(e.ids) for e in encoder_tokenizer.encode_batch([s.tokens for s in sentences], is_pretokenized=True)]
    window = int(option(spec_named("ner").finetune_args, "--max-length"))
    assert max(lengths) <= window, "a block longer than the window is cut by training"
    assert sum(length > window // 2 for length in lengths) >= 0.3 * len(lengths)


def test_squad_answers_are_whole_word_spans_of_their_contexts(tmp_path: Path) -> None:
    examples = read_squad(write("qa", tmp_path, 200))
    assert len(examples) == 600
    for example in examples:
        (answer,), (start,) = example.answer_texts, example.answer_starts
        assert example.context[start : start + len(answer)] == answer
        before = example.context[start - 1] if start else " "
        after = example.context[start + len(answer) : start + len(answer) + 1] or " "
        assert not before.isalnum() and not after.isalnum(), (answer, example.context)
    assert {example.question.split()[0] for example in examples} >= {"Who", "What", "When", "Where", "How"}
    kinds = [example.context.split(".")[0] for example in examples]
    assert sum(" was born in " in first for first in kinds) < 0.5 * len(examples), "not only biographies"


def test_text_lines_cover_the_fill_mask_example_frame(tmp_path: Path) -> None:
    lines = read_text_lines(write("fill-mask", tmp_path, 500))
    assert len(lines) == 500
    assert sum(" is the capital of " in line for line in lines) > 20


@pytest.mark.parametrize("name", sorted(data.WRITERS))
def test_data_depends_only_on_the_seed(tmp_path: Path, name: str) -> None:
    first, second, other = (tmp_path / "a", tmp_path / "b", tmp_path / "c")
    for folder in (first, second, other):
        folder.mkdir()
    paths = [write(name, first, 50), write(name, second, 50), write(name, other, 50, seed=1)]
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes() != paths[2].read_bytes()


@pytest.mark.parametrize("spec", build.DEMOS, ids=lambda spec: spec.name)
def test_command_lines_parse_with_the_training_and_export_clis(spec: build.DemoSpec) -> None:
    training = training_parser().parse_args(
        ["finetune", "--task", spec.task, "--base", "b", "--train", "t", "--out", "o", *spec.finetune_args]
    )
    assert training.task == spec.task and training.max_steps is not None
    exported = export_parser().parse_args(
        ["ckpt", "out", "--task", spec.task, "--quantize", "none", "--no-optimize", *spec.export_args]
    )
    assert exported.task == spec.task and exported.optimize is False


def test_ner_is_served_with_the_windows_it_is_trained_on() -> None:
    spec = spec_named("ner")
    trained = int(option(spec.finetune_args, "--max-length"))
    assert int(option(spec.export_args, "--max-length")) == trained
    assert default_stride(trained) == trained // 4
    assert "--label-subwords" in spec.finetune_args, "the default 'simple' aggregation reads every sub-token"


def test_held_out_lists_and_templates_are_disjoint_from_training() -> None:
    training_words = {word.lower() for pool in TRAINING_NAMES.values() for name in pool for word in name.split()}
    for kind, pool in heldout.HELDOUT_POOLS.items():
        clash = {name for name in pool if name.lower() in training_words}
        assert not clash, f"held-out {kind} also used in training: {clash}"
    assert not set(heldout.CHECK_NER_TEMPLATES) & set(vocabulary.NER_TEMPLATES)
    for field in ("subjects", "actions", "places", "times", "standalone"):
        shared = set(getattr(heldout.CHECK_FILLER, field)) & set(getattr(data.TRAINING_FILLER, field))
        assert not shared, f"filler {field} shared: {shared}"
    for check_words, training in (
        (heldout_probes.CHECK_POSITIVE_WORDS, vocabulary.POSITIVE_WORDS + vocabulary.NEGATIVE_WORDS),
        (heldout_probes.CHECK_NEGATIVE_WORDS, vocabulary.POSITIVE_WORDS + vocabulary.NEGATIVE_WORDS),
        (heldout_probes.CHECK_REVIEW_SUBJECTS, vocabulary.REVIEW_SUBJECTS),
        (heldout_probes.CHECK_POSITIVE_TEMPLATES, vocabulary.POSITIVE_TEMPLATES),
        (heldout_probes.CHECK_NEGATIVE_TEMPLATES, vocabulary.NEGATIVE_TEMPLATES),
    ):
        assert not set(check_words) & set(training)
    held_out_countries = {country for country, _ in heldout_probes.CHECK_CAPITALS}
    assert not held_out_countries & {country for country, _ in vocabulary.CAPITALS}


def test_held_out_names_are_whole_words_of_the_encoder_vocabulary(encoder_tokenizer: Tokenizer) -> None:
    for kind, pool in heldout.HELDOUT_POOLS.items():
        pieces = {name: encoder_tokenizer.encode(name, add_special_tokens=False).tokens for name in pool}
        split = {name: tokens for name, tokens in pieces.items() if len(tokens) != 1}
        assert not split, f"held-out {kind} names split into word pieces: {split}"


def test_held_out_ner_text_plants_about_sixty_entities_in_long_filler() -> None:
    planted = heldout.heldout_ner_text()
    assert 2500 <= planted.words <= 3000
    assert 55 <= len(planted.entities) <= 65
    assert {kind for _, _, kind in planted.entities} == ENTITY_KINDS
    held_out = {word for pool in heldout.HELDOUT_POOLS.values() for name in pool for word in name.split()}
    for start, end, _ in planted.entities:
        assert set(planted.text[start:end].split()) <= held_out, planted.text[start:end]
    training_names = {word for key in ("FIRST", "LAST", "ORG") for name in TRAINING_NAMES[key] for word in name.split()}
    assert not set(re.findall(r"[A-Z][a-z]+", planted.text)) & (training_names - {"Bank", "United", "University"})
    assert planted.text == heldout.heldout_ner_text().text, "the check's text depends only on its seed"


def test_held_out_qa_context_plants_three_people_at_start_middle_and_end() -> None:
    planted = heldout.heldout_qa_context()
    assert 4900 <= planted.words <= 5200
    assert Counter(probe.placement for probe in planted.probes) == {"start": 3, "middle": 3, "end": 3}
    length = len(planted.context)
    where = {"start": (0.0, 0.02), "middle": (0.4, 0.6), "end": (0.98, 1.0)}
    for probe in planted.probes:
        assert planted.context[probe.start : probe.start + len(probe.answer)] == probe.answer
        assert len(re.findall(rf"\b{re.escape(probe.answer)}\b", planted.context)) == 1, probe.answer
        low, high = where[probe.placement]
        assert low <= probe.start / length <= high, (probe, probe.start / length)
    assert planted.context.count(" was born in ") >= 8, "other people's births make the model match the name"


def test_held_out_sentiment_and_fill_mask_probes() -> None:
    rows = heldout_probes.heldout_sentiment()
    assert Counter(label for _, label in rows) == {"POSITIVE": 20, "NEGATIVE": 20}
    probes = heldout_probes.heldout_fill_mask()
    assert len(probes) >= 10 and all(text.count("[MASK]") == 1 for text, _ in probes)


def test_check_thresholds_flag_precision_recall_and_qa_exact_answers() -> None:
    good_ner = {"task": "token-classification", "precision": 0.95, "recall": 0.9}
    assert check.failures("ner", good_ner) == []
    assert len(check.failures("ner", {**good_ner, "precision": 0.89})) == 1
    assert len(check.failures("ner", {**good_ner, "precision": 0.0, "recall": 0.0})) == 2
    good_qa = {"task": "question-answering", "exact": 0.7, "long_right": 0}
    assert check.failures("qa", good_qa) == [], "the long context is reported, not a threshold"
    assert check.failures("qa", {**good_qa, "exact": 0.6}) == ["qa: held-out exact 0.600 < 0.7"]
    assert check.failures("sentiment", {"task": "text-classification", "accuracy": 0.7})
    assert not check.failures("fill-mask", {"task": "fill-mask", "top1": 0.9})


def test_demo_names_match_the_readme_examples() -> None:
    assert [example.model for example in EXAMPLES] == [spec.name for spec in build.DEMOS]
    assert {example.body["model"] for example in EXAMPLES} == set(data.WRITERS)


def test_finished_bundles_are_skipped(
    tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = Path(pytestconfig.cache.mkdir("bertserve-tiny-models"))
    tiny = build_tiny_models(cache / cache_key())
    task_of = {spec.name: spec.task for spec in build.DEMOS}
    for name, task in task_of.items():
        shutil.copytree(tiny[task].bundle, tmp_path / name)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"nothing should run when every bundle is built: {args}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    assert build.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "qa" / "bundle.json").unlink()
    assert not build.is_built(tmp_path / "qa")
    assert build.is_built(tmp_path / "ner")


def test_a_failing_step_names_itself_and_shows_the_log_tail(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('the reason it broke'); sys.exit(3)"]
    with pytest.raises(RuntimeError, match=r"(?s)demo x: training failed \(exit 3\).*the reason it broke"):
        build.run_step("demo x: training", command, tmp_path / "train.log", echo=False)


def test_a_step_gets_the_extra_environment(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import os; print(os.environ['TQDM_MININTERVAL'], os.environ['HF_HUB_OFFLINE'])"]
    build.run_step("demo x: training", command, tmp_path / "t.log", echo=False, env={"TQDM_MININTERVAL": "30"})
    assert (tmp_path / "t.log").read_text().split() == ["30", "1"]


def test_step_output_goes_to_its_log_and_to_the_console(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    command = [sys.executable, "-c", "print('step one'); print('step two')"]
    wall, cpu = build.run_step("demo x: export", command, tmp_path / "export.log", echo=True)
    assert (tmp_path / "export.log").read_text().splitlines() == ["step one", "step two"]
    assert "step one\nstep two" in capfd.readouterr().out
    assert wall > 0 and cpu >= 0


def _fake_build(
    tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch, figures: dict[str, dict]
) -> None:
    """Training and export replaced by a metrics.json and a tiny bundle; the check by ``figures`` per task."""
    cache = Path(pytestconfig.cache.mkdir("bertserve-tiny-models"))
    tiny = build_tiny_models(cache / cache_key())
    specs = {spec.name: spec for spec in build.DEMOS}

    def fake_step(what: str, command: list[str], log_file: Path, echo: bool = True, env: dict | None = None):
        name, step = what.split(": ")
        if step == "training":
            assert env is not None and "TQDM_MININTERVAL" in env, "the training bar must not flood the log"
            out = Path(command[command.index("--out") + 1])
            out.mkdir(parents=True)
            (out / "metrics.json").write_text(json.dumps({"settings": {"total_steps": 7}}))
        else:
            assert "--no-optimize" in command
            shutil.copytree(tiny[specs[name].task].bundle, Path(command[4]))
        log_file.write_text("train:  50%|#####     | 3/7\r" * 500)
        return 2.0, 1.0

    monkeypatch.setattr(build, "run_step", fake_step)
    monkeypatch.setattr(build, "base_model_path", lambda: tmp_path)
    monkeypatch.setattr(check, "check_bundle", lambda name, folder: {**figures[specs[name].task], "seconds": 1.0})


GOOD_FIGURES = {
    "text-classification": {"task": "text-classification", "accuracy": 1.0, "right": 40, "total": 40},
    "token-classification": {
        "task": "token-classification", "precision": 0.95, "recall": 0.9, "correct": 54, "planted": 60,
        "predicted": 57, "invented": 1, "words": 2800,
    },
    "question-answering": {
        "task": "question-answering", "exact": 0.76, "right": 25, "questions": 33, "long_right": 0,
        "long_questions": 9, "long_words": 5000,
    },
    "fill-mask": {
        "task": "fill-mask", "top1": 0.9, "right": 9, "total": 10, "everyday_sensible": 4, "everyday_total": 25,
    },
}  # fmt: skip


def test_the_build_prints_one_line_per_model_with_steps_times_and_held_out_figures(
    tmp_path: Path, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_build(tmp_path, pytestconfig, monkeypatch, GOOD_FIGURES)
    assert build.main(["--out", str(tmp_path / "models"), "--work", str(tmp_path / "work")]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    model_lines = [line for line in lines if line.startswith("[")]
    assert len(model_lines) == 4 and len(lines) == 6, captured.out
    for line, spec in zip(model_lines, build.DEMOS, strict=True):
        assert line.startswith(f"[{build.DEMOS.index(spec) + 1}/4] {spec.name}: ")
        assert "7 steps trained in 2 s" in line and "exported in 2 s" in line and "; held-out " in line
    assert "entity precision 0.95" in captured.out and "exact answers 0.76 (25/33 questions" in captured.out
    assert "DEMO CHECK FAILED" not in captured.err
    assert all(build.is_built(tmp_path / "models" / spec.name) for spec in build.DEMOS)


@pytest.mark.parametrize("strict", [False, True])
def test_a_figure_below_its_threshold_is_reported_loudly(
    tmp_path: Path,
    pytestconfig: pytest.Config,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    strict: bool,
) -> None:
    figures = {**GOOD_FIGURES, "question-answering": {**GOOD_FIGURES["question-answering"], "exact": 0.5}}
    figures["question-answering"]["answers"] = ["Where was X born? -> 'Lyon' (want 'Leeds')"]
    _fake_build(tmp_path, pytestconfig, monkeypatch, figures)
    argv = ["--out", str(tmp_path / "models"), "--only", "qa", *(["--strict"] if strict else [])]
    assert build.main(argv) == (3 if strict else 0)
    err = capsys.readouterr().err
    assert (
        "below their held-out thresholds" in err and "qa: held-out exact 0.500 < 0.7" in err and "want 'Leeds'" in err
    )


def test_held_out_qa_paragraphs_are_answerable_and_share_no_name_with_training() -> None:
    for context, questions in heldout.CHECK_QA_PARAGRAPHS:
        for question, accepted in questions:
            assert question.endswith("?") and all(answer in context for answer in accepted), (question, accepted)
    training_names = {
        word
        for pool in (*vocabulary.TRAINING_POOLS.values(), qa_paragraphs.FIRM_WORDS, qa_paragraphs.RIVERS)
        for name in pool
        for word in name.split()
    }
    capitalised = {
        word.strip(".,").removesuffix("'s")
        for context, _ in heldout.CHECK_QA_PARAGRAPHS
        for word in context.split()
        if word[:1].isupper()
    }
    assert not capitalised & training_names
    assert sum(len(questions) for _, questions in heldout.CHECK_QA_PARAGRAPHS) >= 30
