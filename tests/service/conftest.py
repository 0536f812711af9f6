"""Session fixtures: one tiny random model per task, as an HF checkpoint folder and a bundle folder.

Built once and cached across test runs under pytest's cache folder (keyed by the builder's source),
so only the first run pays for torch/transformers and the exports.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.service.tiny_models import TinyModel, build_tiny_models, cache_key

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_models(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> dict[str, TinyModel]:
    """task -> TinyModel(task, checkpoint, bundle) for the four tasks."""
    cache = getattr(pytestconfig, "cache", None)
    base = Path(cache.mkdir("bertserve-tiny-models")) if cache is not None else tmp_path_factory.mktemp("tiny")
    key = cache_key()
    for stale in base.iterdir():  # models of older builder versions, unused for an hour
        if stale.name != key and time.time() - stale.stat().st_mtime > 3600:
            shutil.rmtree(stale, ignore_errors=True)
    return build_tiny_models(base / key)


@pytest.fixture(scope="session")
def text_classification_model(tiny_models: dict[str, TinyModel]) -> TinyModel:
    return tiny_models["text-classification"]
