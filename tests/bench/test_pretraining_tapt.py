"""benchmarks.pretraining_tapt's report: each start beside its direct fine-tune, gains against random weights."""

from __future__ import annotations

from typing import Any

from benchmarks import accuracy, pretraining_tapt


def run(start: str, sst2: float) -> dict[str, Any]:
    record = {"wall_s": 120, "load_avg": ["0.10 0.20 0.30", "2.00 1.90 1.80"]}
    return {"start": start, "sst2_accuracy": sst2, "mlm_top1_heldout_wikitext": 30.0, "mlm": record, "sst2": record}


def test_report_compares_both_starts_with_random_weights_fine_tuned_directly() -> None:
    text = pretraining_tapt.markdown(
        [run("pretrained-here", 81.5), run("random-init", 79.0)], {"pretrained-here": 80.05, "random-init": 77.75}
    )
    assert "| pretrained-here | 80.05 | **81.50** | 30.00 | 2.0 min / 0.10 0.20 0.30 ; 2.00 1.90 1.80 |" in text
    assert "MLM on SST-2's sentences +3.75; MLM on SST-2's sentences from random weights +1.25." in text


def test_report_leaves_out_the_gains_until_both_starts_ran() -> None:
    text = pretraining_tapt.markdown([run("pretrained-here", 81.5)], {"pretrained-here": 80.05, "random-init": 77.75})
    assert "Against random weights" not in text


def test_the_fine_tune_after_mlm_is_the_direct_rows_recipe() -> None:
    for start in pretraining_tapt.STARTS:
        assert accuracy.RECIPES[f"sst2-{start}"].arguments == accuracy.SST2_ARGUMENTS
