"""benchmarks.studies.pretraining_tapt's report: each start beside its direct fine-tunes, by seed, against random
weights."""

from __future__ import annotations

from typing import Any

from benchmarks import accuracy
from benchmarks.studies import pretraining_tapt

DIRECT = {"pretrained-here": {42: 80.05, 1: 79.24, 2: 79.47}, "random-init": {42: 77.75, 1: 78.44, 2: 78.90}}


def run(start: str, seed: int, sst2: float) -> dict[str, Any]:
    record = {"wall_s": 120, "load_avg": ["0.10 0.20 0.30", "2.00 1.90 1.80"]}
    return {
        "start": start, "seed": seed, "sst2_accuracy": sst2, "mlm_top1_heldout_wikitext": 30.0,
        "mlm": record, "sst2": record,
    }  # fmt: skip


def test_report_sets_each_seed_beside_random_weights_fine_tuned_directly() -> None:
    runs = [run("pretrained-here", 42, 81.55), run("pretrained-here", 1, 81.0), run("random-init", 42, 79.0)]
    text = pretraining_tapt.markdown(runs, DIRECT)
    # seed 42 first, then 1 (2 did not run): (81.55 - 77.75 + 81.00 - 78.44) / 2 = +3.18
    assert "| pretrained-here | 80.05 / 79.24 | **81.55 / 81.00** | **+3.18** |" in text
    assert "| random-init | 77.75 / 78.44 | **79.00 / -** | **+1.25** |" in text
    assert "| pretrained-here, seed 1 | 30.00 | 2.0 min / 0.10 0.20 0.30 ; 2.00 1.90 1.80 |" in text


def test_the_fine_tune_after_mlm_is_the_direct_rows_recipe() -> None:
    for start in pretraining_tapt.STARTS:
        assert accuracy.RECIPES[f"sst2-{start}"].arguments == accuracy.SST2_ARGUMENTS


def test_tapt_rows_fine_tune_the_mlm_checkpoint_and_keep_its_weights() -> None:
    for start in pretraining_tapt.STARTS:
        recipe = accuracy.RECIPES[f"sst2-{start}-tapt"]
        assert accuracy.init_arguments(recipe) == [], "--random-init would throw the MLM pass away"
        assert f"--base runs/accuracy/tapt/mlm-{start} " in accuracy.public_command(recipe)
    assert accuracy.init_arguments(accuracy.RECIPES["sst2-random-init"]) == ["--random-init"]
