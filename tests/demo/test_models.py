"""The demo bundles, served by the real service, give the README's answers and pass the held-out check (slow: builds
MiniLM models).

Builds the missing demo bundles into ``$DEMO_MODELS_DIR`` (default: the repo's models/, as `make demo`
does; finished bundles are reused), serves them with ``python -m service --models DIR`` and checks the
four README requests with the checks docker/container_check.sh uses and every README output line against the
served answer, then scores every bundle with demo/check.py against its thresholds (NER entity precision on a long
text, QA exact answers on everyday paragraphs, sentiment accuracy, fill-mask top-1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from demo import check
from demo.examples import EXAMPLES, run_example
from tests.docker.conftest import REPO
from tests.docker.servers import start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_models_dir() -> Path:
    folder = Path(os.environ.get("DEMO_MODELS_DIR", REPO / "models"))
    # --no-check: test_held_out_check_meets_its_thresholds checks every bundle, built now or before.
    command = [sys.executable, "-m", "demo", "--out", str(folder), "--no-check"]
    subprocess.run(command, check=True, timeout=3600, cwd=REPO)
    return folder


def test_every_demo_is_a_bundle_of_its_task(demo_models_dir: Path) -> None:
    from contract.bundle import read_bundle

    tasks = {name: read_bundle(demo_models_dir / name).spec.task for name in ("sentiment", "ner", "qa", "fill-mask")}
    assert tasks == {
        "sentiment": "text-classification",
        "ner": "token-classification",
        "qa": "question-answering",
        "fill-mask": "fill-mask",
    }
    assert read_bundle(demo_models_dir / "sentiment").spec.id2label == {0: "NEGATIVE", 1: "POSITIVE"}


def test_served_demo_models_answer_the_readme_examples(demo_models_dir: Path) -> None:
    process, port = start_server(["--models", str(demo_models_dir), "--log-level", "warning"], ready_timeout_s=180)
    try:
        outcomes = {example.model: run_example(f"http://127.0.0.1:{port}", example) for example in EXAMPLES}
    finally:
        process.terminate()
        process.communicate(timeout=60)
    failed = {name: detail for name, (passed, detail) in outcomes.items() if not passed}
    assert not failed, json.dumps(failed, indent=2)


def close(served: object, shown: object) -> bool:
    """Equal, numbers within 1e-6 (a rebuild on another machine moves the last digits of small scores)."""
    if isinstance(served, dict) and isinstance(shown, dict):
        return served.keys() == shown.keys() and all(close(served[key], shown[key]) for key in served)
    if isinstance(served, list) and isinstance(shown, list):
        return len(served) == len(shown) and all(close(a, b) for a, b in zip(served, shown, strict=True))
    if isinstance(served, float) or isinstance(shown, float):
        return abs(float(served) - float(shown)) <= 1e-6  # type: ignore[arg-type]
    return served == shown


def test_every_readme_output_is_the_demo_models_answer(demo_models_dir: Path) -> None:
    """Each README curl on a demo model followed by its output line: the served answer is that output."""
    from tests.service.readme_examples import CURL, README

    text = README.read_text()
    shown = []
    for found in CURL.finditer(text):
        output = text[found.end() :].lstrip("\n").split("\n", 1)[0]
        if output.startswith('{"model"'):
            shown.append((found["path"], json.loads(found["body"]), json.loads(output)))
    assert len(shown) >= 7
    process, port = start_server(["--models", str(demo_models_dir), "--log-level", "warning"], ready_timeout_s=180)
    try:
        served = [httpx.post(f"http://127.0.0.1:{port}{path}", json=body, timeout=60).json() for path, body, _ in shown]
    finally:
        process.terminate()
        process.communicate(timeout=60)
    pairs = zip(shown, served, strict=True)
    wrong = [(path, answer) for (path, _, output), answer in pairs if not close(answer, output)]
    assert not wrong, wrong


def test_held_out_check_meets_its_thresholds(demo_models_dir: Path) -> None:
    figures = check.check_models(demo_models_dir, ["sentiment", "ner", "qa", "fill-mask"])
    shown = json.dumps(figures, indent=2)
    assert set(figures) == {"sentiment", "ner", "qa", "fill-mask"}
    assert figures["qa"]["questions"] >= 30
    assert figures["ner"]["precision"] >= 0.9, shown
    assert figures["ner"]["recall"] >= 0.5, shown
    assert figures["ner"]["words"] >= 2500 and figures["ner"]["planted"] >= 55
    failed = [problem for name, result in figures.items() for problem in check.failures(name, result)]
    assert not failed, shown


@pytest.mark.xfail(
    strict=True,
    reason="the QA demo trains for a minute on short paragraphs: in a 5,000-word context among a dozen other "
    "people's facts it does not bind the answer to the asked name (1/9 with long-context training data too)",
)
def test_qa_answers_at_the_start_middle_and_end_of_a_long_context(demo_models_dir: Path) -> None:
    figures = check.check_models(demo_models_dir, ["qa"])["qa"]
    assert figures["long_words"] >= 4900
    assert figures["long_by_placement"] == {"start": 3, "middle": 3, "end": 3}
