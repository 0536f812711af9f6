"""The torch-free bundle reader: every broken bundle is one BundleError naming the folder and the problem."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.bundle import (
    BUNDLE_FILE,
    MODEL_FILE,
    SCHEMA_VERSION,
    TOKENIZER_FILE,
    BundleError,
    BundleSpec,
    read_bundle,
    write_spec,
)
from contract.tasks import TASKS

REPO = Path(__file__).resolve().parents[2]


def make_bundle(folder: Path, task: str = "text-classification") -> Path:
    """A bundle folder with placeholder files: the reader checks files and hashes, it does not run the graph."""
    folder.mkdir(parents=True)
    (folder / MODEL_FILE).write_bytes(b"\x08\x07placeholder graph")
    (folder / TOKENIZER_FILE).write_text(json.dumps({"version": "1.0", "model": {"type": "WordPiece"}}))
    spec = BundleSpec(
        task=task,
        architecture="BertForSequenceClassification",
        max_length=128,
        id2label={0: "negative", 1: "positive"},
        outputs=list(TASKS[task].outputs),
    )
    write_spec(folder, spec)
    return folder


def edit_json(folder: Path, change: Callable[[dict], None]) -> None:
    data = json.loads((folder / BUNDLE_FILE).read_text())
    change(data)
    (folder / BUNDLE_FILE).write_text(json.dumps(data))


def assert_rejected(folder: Path, *fragments: str) -> None:
    with pytest.raises(BundleError) as caught:
        read_bundle(folder)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(folder))
    for fragment in fragments:
        assert fragment in message


def test_a_written_bundle_reads_back(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "bundle")
    bundle = read_bundle(folder)
    assert bundle.spec.id2label == {0: "negative", 1: "positive"}
    assert bundle.model_path == folder / MODEL_FILE
    assert bundle.spec.schema_version == SCHEMA_VERSION


@pytest.mark.parametrize("name", [BUNDLE_FILE, MODEL_FILE, TOKENIZER_FILE])
def test_missing_file(tmp_path: Path, name: str) -> None:
    folder = make_bundle(tmp_path / "bundle")
    (folder / name).unlink()
    assert_rejected(folder, f"missing {name}")


def test_not_a_folder(tmp_path: Path) -> None:
    assert_rejected(tmp_path / "nowhere", "not a folder")


def test_corrupt_bundle_json(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "bundle")
    (folder / BUNDLE_FILE).write_text('{"task": "text-classification", ')
    assert_rejected(folder, "bundle.json is not valid JSON")


def test_corrupt_tokenizer_json(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "bundle")
    (folder / TOKENIZER_FILE).write_text("{not json")
    assert_rejected(folder, "tokenizer.json is not valid JSON")


@pytest.mark.parametrize("name", [MODEL_FILE, TOKENIZER_FILE])
def test_replaced_file_fails_the_hash_check(tmp_path: Path, name: str) -> None:
    folder = make_bundle(tmp_path / "bundle")
    path = folder / name
    path.write_bytes(path.read_bytes().replace(b"placeholder", b"Placeholder").replace(b"1.0", b"2.0"))
    assert_rejected(folder, f"{name} does not match the hash")
    assert read_bundle(folder, verify_hashes=False).path == folder


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 0, None, "1"])
def test_unknown_schema_version(tmp_path: Path, version: object) -> None:
    folder = make_bundle(tmp_path / "bundle")
    edit_json(folder, lambda data: data.update(schema_version=version))
    assert_rejected(folder, "unknown bundle schema version")


def test_task_output_mismatch(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "bundle")
    edit_json(folder, lambda data: data.update(task="question-answering"))
    assert_rejected(folder, "task question-answering needs outputs ['start_logits', 'end_logits']")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda data: data.update(task="summarization"), "unknown task 'summarization'"),
        (lambda data: data.pop("max_length"), "lacks the required field 'max_length'"),
        (lambda data: data.update(surprise=1), "unknown bundle.json fields: surprise"),
        (lambda data: data.update(inputs=["input_ids"]), "inputs must be"),
        (lambda data: data.update(quantization="int4"), "unknown quantization 'int4'"),
        (lambda data: data.update(max_length=4096), "max_length 4096 is outside"),
        (lambda data: data.update(id2label={}), "needs id2label"),
        (lambda data: data.update(id2label={"zero": "negative"}), "bundle.json is malformed"),
    ],
)
def test_inconsistent_spec(tmp_path: Path, change: Callable[[dict], None], fragment: str) -> None:
    folder = make_bundle(tmp_path / "bundle")
    edit_json(folder, change)
    assert_rejected(folder, fragment)


def test_bundle_json_that_is_not_an_object(tmp_path: Path) -> None:
    folder = make_bundle(tmp_path / "bundle")
    (folder / BUNDLE_FILE).write_text("[1, 2]")
    assert_rejected(folder, "not a JSON object")


@pytest.mark.parametrize("module", ["contract.bundle", "model_export"])
def test_reader_imports_without_torch(module: str) -> None:
    code = f"import {module}, sys; assert 'torch' not in sys.modules, 'torch imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
