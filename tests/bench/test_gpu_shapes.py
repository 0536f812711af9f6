"""benchmarks.gpu_shapes: its figures and its report (the padding it times is the service's own:
tests/service/test_shape_buckets.py)."""

from __future__ import annotations

import json

from benchmarks.gpu_shapes import markdown, summary


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
