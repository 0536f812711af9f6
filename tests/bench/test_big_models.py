"""benchmarks.big_models / random_bert / big_models_report: the sizes are BERT-base and -large, a build is recognised
and redone when it differs, the file size counts external data, latencies after the warm-up, and the table's ratios."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.big_models import latencies_after, median_leaves, onnx_bytes
from benchmarks.big_models_report import markdown
from benchmarks.gpu_torch import timed as timed_passes
from benchmarks.overload_client import Tally
from benchmarks.random_bert import SIZES, build_spec, default_labels, is_built


def test_sizes_are_bert_base_and_large() -> None:
    assert (SIZES["base"].layers, SIZES["base"].hidden, SIZES["base"].heads, SIZES["base"].ffn) == (12, 768, 12, 3072)
    assert (SIZES["large"].layers, SIZES["large"].hidden, SIZES["large"].heads, SIZES["large"].ffn) == (
        24, 1024, 16, 4096,
    )  # fmt: skip
    assert all(size.hidden % size.heads == 0 for size in SIZES.values())


def test_a_checkpoint_is_reused_only_when_built_the_same_way(tmp_path: Path) -> None:
    spec = build_spec("base", "BertForSequenceClassification", default_labels("BertForSequenceClassification"))
    assert not is_built(tmp_path, spec)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"x")
    (tmp_path / "random_bert.json").write_text(json.dumps(spec))
    assert is_built(tmp_path, spec)
    assert not is_built(tmp_path, build_spec("large", "BertForSequenceClassification", ("LABEL_0", "LABEL_1")))
    assert len(default_labels("BertForTokenClassification")) == 9


def test_onnx_bytes_count_external_data(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"a" * 100)
    (tmp_path / "model.onnx.data").write_bytes(b"b" * 1000)
    (tmp_path / "tokenizer.json").write_bytes(b"c" * 50)
    assert onnx_bytes(tmp_path) == 1100


def test_latencies_after_the_warmup_and_timed_passes() -> None:
    tally = Tally()
    tally.admitted_latencies = [0.5, 0.2, 0.3]
    tally.admitted_finished = [1.0, 2.0, 3.0]
    assert latencies_after(tally, 1.5) == [0.2, 0.3]
    calls: list[int] = []
    times = timed_passes(lambda: calls.append(1), 0.0, minimum=3)
    assert len(times) == len(calls) == 3


def test_rounds_give_medians_summed_answers_and_each_rounds_ratio() -> None:
    rounds = [result(raw_speed=raw, served_speed=served)["bundles"][0] for raw, served in ((10, 9), (12, 12), (11, 10))]  # type: ignore[index]
    merged = median_leaves([{"raw": r["raw"], "served": r["served"]} for r in rounds])
    assert merged["raw"]["128"]["sequences_per_s"] == 11
    assert merged["served"]["lengths"]["128"]["c32_sequences_per_s"] == 10
    assert merged["served"]["lengths"]["128"]["c32_statuses"] == {"200": 120}
    report = result(raw_speed=11, served_speed=10)
    report["settings"]["rounds"] = 3  # type: ignore[index]
    report["bundles"][0]["rounds"] = rounds  # type: ignore[index]
    text = markdown(report)
    assert "3 rounds" in text
    assert "served / raw by round: c=32 0.900, 1.000, 0.909 (median 0.909)" in text
    assert "by round" not in markdown(result(raw_speed=11, served_speed=10))


def result(raw_speed: float, served_speed: float | None) -> dict[str, object]:
    bundle = {
        "size": "base", "quantization": "fp32", "onnx_bytes": 438_000_000, "tokens": {"128": [128]},
        "export": {"wall_s": 26.0, "peak_rss_bytes": 4_000_000_000},
        "served": {"startup_s": 5.0, "rss_ready_bytes": 1_752_000_000, "rss_after_load_bytes": 1_800_000_000,
                   "lengths": {"128": {"c32_sequences_per_s": served_speed, "c32_statuses": {"200": 40},
                                       "c1_p50_ms": 80.5, "c1_statuses": {"200": 10}}}},
        "raw": {"128": {"sequences_per_s": raw_speed, "best_batch_size": 32, "batch1_median_ms": 60.5}},
    }  # fmt: skip
    return {
        "command": "python -m benchmarks.big_models", "started_utc": "now", "cpu_count": 2, "wall_s": 600.0,
        "load_avg": {"start": [0.1, 0.2, 0.3], "end": [2.0, 1.9, 1.0]}, "server_env": {},
        "settings": {"server_args": "", "duration": 15.0, "raw_batch_sizes": [8, 32], "concurrency": 32,
                     "warmup": 3.0},
        "bundles": [bundle],
    }  # fmt: skip


def test_report_gives_ratios_to_raw_and_to_the_file() -> None:
    text = markdown(result(raw_speed=16.8, served_speed=16.0))
    assert "| base | fp32 | 438 | 26.0 | 4.00 | 5.0 | 1,752 | 4.00x | 1,800 |" in text
    assert "| base | fp32 | 128 | 16.80 (32) | 16.00 | 0.95x | 60.5 | 80.5 | 20.0 | 1.33x |" in text
    assert "[0.1, 0.2, 0.3]" in text and "[2.0, 1.9, 1.0]" in text
    assert "| 16.80 (32) | - | - |" in markdown(result(raw_speed=16.8, served_speed=None))
