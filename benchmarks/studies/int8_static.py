"""int8 variants of a served fp32 bundle's fused graph, dynamic and static, scored in-process on a text task's dev set
(the export's own predictor, `model_export.task_eval`), beside the fp32 graph (issue 25 item 1).

    python -m benchmarks.studies.int8_static runs/accuracy/bundles/sst2-fp32 --task sst2
    python -m benchmarks.studies.int8_static runs/accuracy/bundles/rte-fp32 --task rte --rows 1024

Static variants calibrate on ``--rows`` training rows drawn with seed 0 (as benchmarks.accuracy's exports do).
Prints one line per variant: the accuracy and how many dev predictions differ from fp32's.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx

from benchmarks.datasets import SCRATCH_DIR, read_rte, read_sst2
from contract.bundle import read_bundle
from model_export import optimize
from model_export.calibration import WindowReader, quantize_int8_static
from model_export.task_eval import EvalModel, predict, row_windows, score

log = logging.getLogger("benchmarks.studies.int8_static")
WORK = SCRATCH_DIR / "int8-static"


def text_rows(task: str, split: str) -> list[dict[str, Any]]:
    data = read_sst2(split) if task == "sst2" else read_rte(split)
    return [text.eval_row() for text in data]


def variants(source: Path, reader: WindowReader) -> dict[str, Callable[[Path], None]]:
    def dynamic(keep: dict[str, str]) -> Callable[[Path], None]:
        return lambda target: optimize.quantize_int8(source, target, list(keep))

    def static(keep: dict[str, str], options: dict[str, Any] | None = None) -> Callable[[Path], None]:
        return lambda target: quantize_int8_static(source, target, reader, list(keep), options)

    def ffn(layers: int) -> dict[str, str]:
        return optimize.kept_fp32_nodes(source, layers, False)

    return {
        "dynamic, all int8": dynamic({}),
        "dynamic, attention fp32": dynamic(optimize.kept_fp32_nodes(source, 0, True)),
        "static, every MatMul": static({}),
        "static, moving-average ranges": static({}, {"CalibMovingAverage": True}),
        "static, symmetric activations": static({}, {"ActivationSymmetric": True}),
        "static, FFN outputs of layers 0-2 fp32": static(ffn(3)),
        "static, every FFN output fp32": static(ffn(99)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.int8_static", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("bundle", type=Path, help="a served fp32 bundle folder")
    parser.add_argument("--task", choices=["sst2", "rte"], required=True)
    parser.add_argument("--rows", type=int, default=256, help="calibration rows drawn from the training split")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")  # not the quantiser's per-tensor notes
    log.setLevel(logging.INFO)
    bundle = read_bundle(args.bundle)
    model = EvalModel.from_bundle(bundle)
    dev = text_rows(args.task, "dev")
    calibration = random.Random(0).sample(text_rows(args.task, "train"), args.rows)
    inputs = [node.name for node in onnx.load(str(bundle.model_path), load_external_data=False).graph.input]
    reader = WindowReader(row_windows(model, calibration), model.pad_token_id, model.use_token_types, inputs)
    fp32 = predict(model, bundle.model_path, dev)
    log.info("fp32: %.2f", score("text-classification", dev, fp32))
    WORK.mkdir(parents=True, exist_ok=True)
    for name, quantize in variants(bundle.model_path, reader).items():
        target = WORK / "int8.onnx"
        reader.rewind()
        quantize(target)
        labels = predict(model, target, dev)
        changed = sum(a != b for a, b in zip(fp32, labels, strict=True))
        log.info("%s: %.2f (%d predictions changed)", name, score("text-classification", dev, labels), changed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
