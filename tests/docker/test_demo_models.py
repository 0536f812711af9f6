"""The demo bundles, served by the real service, give the README's answers (slow: builds MiniLM models).

Builds the missing demo bundles into ``$DEMO_MODELS_DIR`` (default: the repo's models/, as `make demo`
does; finished bundles are reused), serves them with ``python -m service --models DIR`` and checks the
four README requests with the checks docker/container_check.sh uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docker.conftest import DOCKER, REPO
from tests.docker.servers import start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo_models_dir() -> Path:
    folder = Path(os.environ.get("DEMO_MODELS_DIR", REPO / "models"))
    subprocess.run([sys.executable, str(DOCKER / "demo_models.py"), "--out", str(folder)], check=True, timeout=3600)
    return folder


def test_every_demo_is_a_bundle_of_its_task(demo_models_dir: Path) -> None:
    from model_export.bundle import read_bundle

    tasks = {name: read_bundle(demo_models_dir / name).spec.task for name in ("sentiment", "ner", "qa", "fill-mask")}
    assert tasks == {
        "sentiment": "text-classification",
        "ner": "token-classification",
        "qa": "question-answering",
        "fill-mask": "fill-mask",
    }
    assert read_bundle(demo_models_dir / "sentiment").spec.id2label == {0: "NEGATIVE", 1: "POSITIVE"}


def test_served_demo_models_answer_the_readme_examples(demo_models_dir: Path) -> None:
    from demo_examples import EXAMPLES, run_example

    process, port = start_server(["--models", str(demo_models_dir), "--log-level", "warning"], ready_timeout_s=180)
    try:
        outcomes = {example.model: run_example(f"http://127.0.0.1:{port}", example) for example in EXAMPLES}
    finally:
        process.terminate()
        process.communicate(timeout=60)
    failed = {name: detail for name, (passed, detail) in outcomes.items() if not passed}
    assert not failed, json.dumps(failed, indent=2)
