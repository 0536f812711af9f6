from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from service.tasks.base import sigmoid, softmax, truncating_tokenizer
from service.tasks.fill_mask import top_indices

SETTINGS = [(16, 0, "longest_first"), (24, 4, "longest_first"), (28, 6, "only_second"), (32, 8, "only_second")]
PAIR = ("who lives in paris and works in geneva?", "john smith lives in paris and works for the united nations. " * 4)


@pytest.fixture(scope="module")
def base(tokenizer_dir: Path) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def windows(base: Tokenizer, setting: tuple[int, int, str]) -> list[list[int]]:
    encoding = truncating_tokenizer(base, *setting).encode(*PAIR)
    return [window.ids for window in [encoding, *encoding.overflowing]]


def test_truncating_copies_leave_the_shared_tokenizer_alone(base: Tokenizer) -> None:
    for setting in SETTINGS:
        assert all(len(ids) <= setting[0] for ids in windows(base, setting))
    assert base.truncation is None
    assert len(base.encode(*PAIR).ids) > 32


def test_concurrent_settings_do_not_interfere(base: Tokenizer) -> None:
    expected = {setting: windows(base, setting) for setting in SETTINGS}
    jobs = SETTINGS * 50
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda setting: windows(base, setting), jobs))
    for setting, result in zip(jobs, results, strict=True):
        assert result == expected[setting]


def test_top_indices_orders_like_a_stable_argsort() -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(0, 20, size=500).astype(np.float32)  # many ties
    for k in (1, 5, 37, 499, 500):
        assert top_indices(values, k).tolist() == np.argsort(-values, kind="stable")[:k].tolist()


def test_score_functions_keep_float32() -> None:
    logits = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    assert softmax(logits).dtype == np.float32
    assert np.allclose(softmax(logits), [[1.0, 0.0, 0.0]])
    assert np.allclose(sigmoid(np.array([0.0], dtype=np.float32)), [0.5])
