"""benchmarks.lora_training's report: LoRA's speed and memory against full fine-tuning of the same size."""

from __future__ import annotations

from benchmarks.lora_training import TRAINABLE, markdown


def test_the_report_gives_lora_against_full_per_size() -> None:
    runs = [
        {"size": "base", "mode": "full", "s_per_step": 3.0, "peak_rss_mb": 2000, "trainable_parameters": None},
        {"size": "base", "mode": "lora", "s_per_step": 2.0, "peak_rss_mb": 1500, "trainable_parameters": 296450},
    ]
    figures = {"command": "c", "tree": "t", "settings": {"steps": 8, "batch_size": 8, "max_length": 128},
               "runs": runs, "load_avg": {"start": [0.1], "end": [2.0]}}  # fmt: skip
    report = markdown(figures)
    assert "| base | full | all | 3.00 | 1.00x | 2000 | 1.00x |" in report
    assert "| base | lora | 296,450 | 2.00 | 1.50x | 1500 | 0.75x |" in report


def test_trainable_parameters_are_read_from_the_finetune_log() -> None:
    line = "INFO training.lora: LoRA rank 8 on query,value: 296,450 of 109,778,690 parameters train"
    found = TRAINABLE.search(line)
    assert found is not None and found.group(1) == "296,450"
