"""Which nodes cost int8 its accuracy: quantise a served fp32 bundle's graph with some nodes left in fp32, serve each
variant and score the task's eval set through HTTP (issue 25 item 1).

    python -m benchmarks.studies.int8_nodes runs/accuracy/bundles/squad-fp32 --task squad
    python -m benchmarks.studies.int8_nodes runs/accuracy/bundles/sst2-fp32 --task sst2

Variants: everything int8 (the export's default), the QA head, the last layer, every attention, every feed-forward
output projection, and those of the first layers or the last ones. Each row: the metric, the graph's size and how
long the scoring took (a rough speed figure: one pass over the eval set, served with the defaults). Dynamic int8
scales activations per batch, so a variant's score moves by a few tenths with how the server happened to batch.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from benchmarks import served_scores
from benchmarks.datasets import SCRATCH_DIR, read_squad, read_sst2
from benchmarks.servers import bertserve_command, free_port, running
from contract.bundle import file_sha256
from model_export.optimize import FFN_OUTPUT, _quantize_dynamic

log = logging.getLogger("benchmarks.studies.int8_nodes")
WORK = SCRATCH_DIR / "int8-nodes"


def variants(names: list[str], layers: int) -> dict[str, list[str]]:
    def ffn_outputs(which: range) -> list[str]:
        return [name for name in names if (found := FFN_OUTPUT.search(name)) and int(found.group(1)) in which]

    last = f"layer.{layers - 1}/"
    return {
        "all int8": [],
        "QA / classifier head fp32": [name for name in names if "qa_outputs" in name or "classifier" in name],
        "last layer fp32": [name for name in names if last in name] + [f"Attention_{layers - 1}"],
        "attention fp32": [name for name in names if name.startswith("Attention_")],
        "every FFN output fp32": ffn_outputs(range(layers)),
        "FFN outputs of layers 0-1 fp32": ffn_outputs(range(2)),
        "FFN outputs of layers 0-2 fp32": ffn_outputs(range(3)),
        f"FFN outputs of layers {layers - 2}-{layers - 1} fp32": ffn_outputs(range(layers - 2, layers)),
    }


def make_variant(source: Path, out: Path, keep_fp32: list[str]) -> Path:
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(source, out)
    _quantize_dynamic(source / "model.onnx", out / "model.onnx", keep_fp32)
    spec = json.loads((out / "bundle.json").read_text())
    spec["quantization"] = "int8"
    spec["files_sha256"]["model.onnx"] = file_sha256(out / "model.onnx")
    (out / "bundle.json").write_text(json.dumps(spec, indent=2))
    return out


def scorer(task: str) -> tuple[str, Callable[[served_scores.Served], dict[str, float]]]:
    if task == "squad":
        examples = read_squad(16)
        return "f1", lambda served: served_scores.squad_scores(served, examples)
    rows = read_sst2("dev")
    return "accuracy", lambda served: served_scores.classification_accuracy(served, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.int8_nodes", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("bundle", type=Path, help="a served fp32 bundle (its model.onnx is the fused graph)")
    parser.add_argument("--task", choices=("squad", "sst2"), required=True)
    parser.add_argument("--out", type=Path, help="results prefix (.json); default benchmarks/scratch/int8-nodes")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    graph = onnx.load(str(args.bundle / "model.onnx"), load_external_data=False).graph
    names = [node.name for node in graph.node]
    layers = sum(1 for node in graph.node if node.op_type == "Attention")
    metric, score = scorer(args.task)
    rows: list[dict[str, Any]] = []
    for label, keep in {"fp32": None, **variants(names, layers)}.items():
        bundle = args.bundle if keep is None else make_variant(args.bundle, WORK / label.replace(" ", "-"), keep)
        port = free_port()
        command = bertserve_command({"m": bundle}, port)
        with running(f"int8-{args.task}", command, port, "/health/ready", WORK) as server:
            started = time.perf_counter()
            value = score(served_scores.Served(server.base_url, "m"))[metric]
            rows.append({
                "variant": label, metric: round(value, 2), "fp32_nodes": len(keep or []),
                "onnx_mb": round((bundle / "model.onnx").stat().st_size / 1e6, 1),
                "score_s": round(time.perf_counter() - started, 1),
            })  # fmt: skip
        log.info("%s", rows[-1])
    out = (args.out or WORK / f"{args.task}").with_suffix(".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"bundle": str(args.bundle), "task": args.task, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
