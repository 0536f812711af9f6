"""The family x task table: each encoder family's tiny random checkpoint exported fp32 and int8 for each head.

For every cell it records what ``export_bundle`` measured: the fp32 graph's largest difference from torch (after
fusion where onnxruntime fuses the family), whether attention fused, and the int8 graph's top-1 agreement with
torch. Whether the served answers equal the pipelines is tests/service/test_family_parity.py's part.

    python -m benchmarks.family_table        # -> benchmarks/results/families.{json,md}
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.datasets import RESULTS_DIR
from model_export.export import ExportError, export_bundle
from model_export.families import FAMILIES
from model_export.family_checkpoints import KITS, build_family_checkpoint

log = logging.getLogger("benchmarks.family_table")
TASKS = ("text-classification", "token-classification", "question-answering", "fill-mask", "feature-extraction")
OUT = RESULTS_DIR / "families"


def measure_cell(model_type: str, task: str, work: Path) -> dict[str, Any]:
    checkpoint = build_family_checkpoint(model_type, task, work / f"{model_type}-{task}")
    cell: dict[str, Any] = {}
    for quantize in ("none", "int8"):
        try:
            bundle = export_bundle(checkpoint, work / f"{model_type}-{task}-{quantize}", task=task, quantize=quantize)
            spec = bundle.spec
        except ExportError as error:
            cell[quantize] = {"error": str(error)}
            continue
        parity = spec.parity["int8" if quantize == "int8" else "fp32"]
        cell[quantize] = {
            "inputs": spec.inputs,
            "fused_attention": spec.fused_operators.get("Attention", 0),
            "max_abs_diff": max(parity.get("max_abs_diff", {}).values(), default=None),
            "top1_agreement": min(parity.get("top1_agreement", {}).values(), default=None),
            "min_cosine": min(parity.get("min_cosine", {}).values(), default=None),
        }
    return cell


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Encoder families x tasks (`python -m benchmarks.family_table`)",
        "",
        f"Started {results['started_utc']} UTC; load average {results['load_avg']['start']} at start, "
        f"{results['load_avg']['end']} at end. Tiny random checkpoints (2 layers, hidden 32) with each family's own "
        "kind of tokenizer (`model_export.family_checkpoints`). A cell: fp32 max |ONNX - torch| (`F`: attention "
        "fused in every layer) / int8 top-1 agreement with torch (sentence embeddings: min cosine). The served "
        "answers of the first four tasks equal transformers' pipelines (`tests/service/test_family_parity.py`), "
        "the embeddings sentence-transformers' (`tests/model_export/test_families.py`).",
        "",
        "| family | code | fine-tunable here | " + " | ".join(TASKS) + " |",
        "|---|---|---|" + "---|" * len(TASKS),
    ]
    for model_type, row in results["families"].items():
        family = FAMILIES[model_type]
        cells = []
        for task in TASKS:
            fp32, int8 = row[task].get("none", {}), row[task].get("int8", {})
            if "error" in fp32:
                cells.append(f"refused: {fp32['error']}")
                continue
            fused = " F" if fp32["fused_attention"] else ""
            quality = int8.get("top1_agreement") if int8.get("top1_agreement") is not None else int8.get("min_cosine")
            int8_text = int8.get("error", f"{quality:.3f}" if quality is not None else "-")
            cells.append(f"{fp32['max_abs_diff']:.1e}{fused} / {int8_text}")
        tunable = "yes" if family.code == "ours" else "no (transformers' Trainer, then export)"
        lines.append(f"| {family.name} | {family.code} | {tunable} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.family_table", description=__doc__)
    parser.add_argument("--families", default=",".join(KITS), help="comma-separated model types")
    parser.add_argument("--out", type=Path, default=OUT, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, Any] = {
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "load_avg": {"start": [round(x, 2) for x in os.getloadavg()]},
        "families": {},
    }
    with tempfile.TemporaryDirectory(prefix="family-table-") as scratch:
        for model_type in args.families.split(","):
            results["families"][model_type] = {task: measure_cell(model_type, task, Path(scratch)) for task in TASKS}
            log.warning("%s done", model_type)
    results["load_avg"]["end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
