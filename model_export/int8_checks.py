"""What an int8 graph is checked and reported against: the fp32 graph it came from, and the eval-data gate."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contract.bundle import BundleSpec
from contract.onnx_io import ort_session
from model_export.memory import release_memory
from model_export.validate import (
    ExportError,
    InputFeeds,
    Tolerance,
    ValueMismatch,
    agreement_between,
    run_session,
    sequences_per_second,
    session_runner,
)

logger = logging.getLogger(__name__)

SPEED_BATCH = (8, 128)
# int8 on natural text, held tighter than the random-token probe (0.95). Per-channel int8 all-MiniLM-L6-v2 keeps
# sentence-embedding cosines >= 0.99 for each probe text run alone, but 0.988 at worst in the padded probe batches:
# dynamic int8 scales activations over the whole batch, padding included. Only cosine-judged (embedding) outputs
# are held to it; the other outputs' agreement on the texts is reported.
TEXT_TOLERANCE_INT8 = Tolerance(atol=None, min_cosine=0.98)


def compare_with_fp32(
    task: str, fp32_path: Path, int8_path: Path, batches: Sequence[InputFeeds], speed_batch: InputFeeds
) -> dict[str, Any]:
    """int8 against the fp32 graph it came from: top-1 agreement / cosine on the probe and the measured speed-up.

    One session at a time (each closed before the next opens), so the fp32 weights are never held twice.
    """
    outputs, rates = {}, {}
    for label, path in (("fp32", fp32_path), ("int8", int8_path)):
        session = ort_session(path)
        outputs[label] = [run_session(session, batch) for batch in batches]
        rates[label] = sequences_per_second(session_runner(session), speed_batch, 0.3)
        del session
        release_memory()
    return {
        "vs_fp32": agreement_between(task, batches, outputs["fp32"], outputs["int8"]),
        "fp32_sequences_per_second": round(rates["fp32"], 2),
        "int8_sequences_per_second": round(rates["int8"], 2),
        "speedup_vs_fp32": round(rates["int8"] / rates["fp32"], 3),
        "speed_batch": list(speed_batch["input_ids"].shape),
    }


VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


def cpu_has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether this CPU sums int8 products in int32 (VNNI, AMX); None where /proc/cpuinfo has no x86 flags."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), None)
    return None if flags is None else bool(VNNI_FLAGS & set(flags))


def explain_int8_mismatch(
    error: ValueMismatch, reduce_range: bool, cpuinfo: Path = Path("/proc/cpuinfo")
) -> ValueMismatch:
    """The int8 parity failure, naming the likely cause where 8-bit weights ran on an x86 CPU without VNNI: its
    u8 x s8 products are summed pairwise in int16, which saturates (onnxruntime's quantization docs)."""
    if reduce_range or cpu_has_vnni(cpuinfo) is not False:
        return error
    hint = "this CPU has no VNNI, where 8-bit int8 weights saturate: export with --int8-reduce-range (7-bit weights)"
    return ValueMismatch("int8 graph", [*error.failures, hint])


def check_eval_options(quantize: str, eval_data: str | Path | None, max_loss: float | None) -> None:
    if eval_data is not None and quantize != "int8":
        raise ExportError("--eval-data measures what int8 costs: it needs --quantize int8")
    if max_loss is not None and eval_data is None:
        raise ExportError("--max-loss needs --eval-data (the rows the loss is measured on)")
    if max_loss is not None and not max_loss >= 0:
        raise ExportError(f"--max-loss must be >= 0 percentage points, got {max_loss}")


def log_int8_verdict(figures: dict[str, Any]) -> None:
    summary = (
        f"{figures['metric']} fp32 {figures['fp32']:.2f}, int8 {figures['int8']:.2f} (loss {figures['loss']:.2f} "
        f"points, {figures['changed_predictions']} of {figures['rows']} predictions changed)"
    )
    if figures["int8_accepted"]:
        logger.info("int8 kept: %s", summary)
    else:
        logger.warning(
            "int8 NOT written: %s is over --max-loss %g; the bundle keeps the fp32 graph", summary, figures["max_loss"]
        )


def served_precision(spec: BundleSpec) -> str:
    """What the bundle's one graph computes in, for the export's summary line: "serves int8 (dynamic, per-channel)"."""
    if spec.quantization == "int8":
        int8 = spec.parity.get("int8", {})
        how = ["static, calibrated" if "calibration" in int8 else "dynamic", "per-channel"]
        if int8.get("kept_fp32"):
            how.append(f"{len(int8['kept_fp32'])} nodes kept fp32")
        return f"serves int8 ({', '.join(how)})"
    if spec.quantization_eval and not spec.quantization_eval.get("int8_accepted", True):
        return f"serves {spec.precision}: int8 lost more than --max-loss and was not written"
    return f"serves {spec.precision}"
