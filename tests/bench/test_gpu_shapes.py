"""benchmarks.gpu_shapes: a bucketed batch is the batch, grown to its bucket with rows and positions that attend to
nothing; and the study runs on the CPU end to end (the card's run is the same code on CUDA)."""

from __future__ import annotations

import json

import numpy as np

from benchmarks.gpu_shapes import bucketed, markdown, summary
from contract.onnx_io import pad_rows


def test_a_bucketed_batch_keeps_its_rows_and_grows_with_padding_only() -> None:
    rows = [([101, 7, 8, 102], [0, 0, 0, 0]), ([101, 9, 102], [0, 0, 0]), ([101, 5, 6, 7, 8, 102], [0] * 6)]
    padded = pad_rows(rows, pad_token_id=0)
    grown = bucketed(padded.feeds, pad_id=0)
    assert grown["input_ids"].shape == (4, 16)  # 3 rows -> 4, 6 tokens -> 16
    for name, array in padded.feeds.items():
        assert np.array_equal(grown[name][:3, :6], array)
        assert not grown[name][3:].any() and not grown[name][:, 6:].any()
    exact = pad_rows(rows[:2] * 4, pad_token_id=0)  # 8 rows of 4 tokens: rows already a power of two
    assert bucketed(exact.feeds, pad_id=0)["input_ids"].shape == (8, 16)


def test_summary_splits_nothing_when_there_are_no_calls() -> None:
    assert summary([]) == {"calls": 0}
    figures = summary([0.001, 0.002, 0.003, 0.050])
    assert figures["calls"] == 4 and figures["median_ms"] == 2.5 and figures["p90_ms"] == 3.0
    report = {
        "bundle": "b", "device": "cpu", "calls": 4, "max_rows": 2, "load_avg": {"start": [0], "end": [0]},
        "variants": [{"variant": "exact", "module_loading": "default", "shapes": 3, "first_seen": figures,
                      "same_batch_again": summary([0.001] * 4), "seen_before": summary([]),
                      "first_call_extra_s": 0.052}],
    }  # fmt: skip
    table = markdown(json.loads(json.dumps(report)))
    assert "| exact | default | 3 | 4: 2.5 / 14.0 / 3.0 (0.056) | 4: 1.0 / 1.0 / 1.0 (0.004) | 0.052 | none |" in table
