"""The export's last line says which precision the bundle serves: its one graph's, not the options it was given."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.bundle import BundleSpec
from model_export.__main__ import main
from model_export.int8_checks import served_precision


def spec(**fields: object) -> BundleSpec:
    return BundleSpec(task="text-classification", architecture="BertForSequenceClassification", max_length=32, **fields)


@pytest.mark.parametrize(
    ("fields", "served"),
    [
        ({}, "serves fp32"),
        ({"precision": "fp16"}, "serves fp16"),
        ({"quantization": "int8", "parity": {"int8": {}}}, "serves int8 (dynamic, per-channel)"),
        (
            {"quantization": "int8", "parity": {"int8": {"calibration": {"rows": 8}, "kept_fp32": {"a": "", "b": ""}}}},
            "serves int8 (static, calibrated, per-channel, 2 nodes kept fp32)",
        ),
        (
            {"quantization_eval": {"int8_accepted": False}},
            "serves fp32: int8 lost more than --max-loss and was not written",
        ),
        ({"quantization_eval": {"int8_accepted": True}}, "serves fp32"),
    ],
)
def test_served_precision_names_the_graph_the_bundle_holds(fields: dict[str, object], served: str) -> None:
    assert served_precision(spec(**fields)) == served


def test_the_summary_line_of_the_cli_says_what_the_bundle_serves(
    checkpoint: Callable[[str, str], Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = checkpoint("ours", "text-classification")
    for quantize, served in (("none", "serves fp32"), ("int8", "serves int8 (dynamic, per-channel)")):
        out = tmp_path / quantize
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="model_export"):
            assert main([str(source), str(out), "--quantize", quantize]) == 0
        done = [record.getMessage() for record in caplog.records if record.getMessage().startswith("done: ")]
        assert len(done) == 1 and done[0].startswith(f"done: {out} (text-classification, {served}); peak RSS "), done
