"""The performance targets a benchmark run is judged by (issue 14), each with the concurrencies it counts at.

Throughput targets take the worst ratio over their concurrencies; against raw ORT a point counts its lower
ratio, i.e. the one to the higher of the two bounds. The latency target sets bertserve's p50 at concurrency 1
against raw ORT's batch-1 time per input (the best of spinning on and off in its sweep, tokenization included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RAW_FP32_BOUNDS = ("bertserve_fp32/raw_fp32", "bertserve_fp32/raw_global_fp32")
RAW_INT8_BOUNDS = ("bertserve_int8/raw_int8", "bertserve_int8/raw_global_int8")
LATENCY_SLACK_MS = 1.0  # c=1: p50 <= raw batch-1 time + this


@dataclass(frozen=True)
class Target:
    title: str
    keys: tuple[str, ...]  # ratio names; a point counts the lowest of those it has
    goal: float
    min_concurrency: int


TARGETS = (
    Target("bertserve >= 0.9x raw ORT (fp32, the higher bound), c >= 32", RAW_FP32_BOUNDS, 0.9, 32),
    Target("bertserve >= 0.9x raw ORT (int8, the higher bound), c >= 32", RAW_INT8_BOUNDS, 0.9, 32),
    Target("bertserve fp32 >= 5x naive pipeline app, c >= 8", ("bertserve_fp32/naive",), 5.0, 8),
    Target("bertserve fp32 >= 2.5x infinity-emb (torch), c >= 8", ("bertserve_fp32/infinity",), 2.5, 8),
    Target("bertserve int8 >= 2x bertserve fp32, c >= 32", ("bertserve_int8/bertserve_fp32",), 2.0, 32),
)
# infinity-emb's own job (embeddings, rerank)
INFINITY_JOB_TARGETS = (
    Target("bertserve fp32 >= 2x infinity-emb (torch), c >= 8", ("bertserve_fp32/infinity",), 2.0, 8),
    Target("bertserve >= 0.9x raw ORT (fp32, the higher bound), c >= 8", RAW_FP32_BOUNDS, 0.9, 8),
    Target("bertserve >= 0.9x raw ORT (int8, the higher bound), c >= 8", RAW_INT8_BOUNDS, 0.9, 8),
)


def raw_task(task: str) -> str:
    """The raw ORT row a throughput task is set against: both embedding request sizes share one raw limit."""
    return "embeddings" if task.startswith("embeddings-") else task


def infinity_job(task: str) -> bool:
    return raw_task(task) in ("embeddings", "rerank")


def check_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target that the run has figures for, with its worst value and whether it is met."""
    verdicts = []
    for task in sorted({entry["task"] for entry in results["ratios"]}):
        for target in INFINITY_JOB_TARGETS if infinity_job(task) else TARGETS:
            values = [
                min(entry[key] for key in target.keys if key in entry)
                for entry in results["ratios"]
                if entry["task"] == task and entry["concurrency"] >= target.min_concurrency
                and any(key in entry for key in target.keys)
            ]  # fmt: skip
            if values:
                worst = min(values)
                met = worst >= target.goal
                verdicts.append({"task": task, "target": target.title, "goal": target.goal, "worst": worst, "met": met})
    verdicts += latency_verdicts(results)
    for name, scores in results.get("accuracy", {}).items():
        if "fp32" in scores and "int8" in scores:
            metric = scores["metric"]
            loss = round(scores["fp32"][metric] - scores["int8"][metric], 2)
            title = f"int8 loses < 1 point of {metric}"
            verdicts.append({"task": name, "target": title, "goal": 1.0, "worst": loss, "met": loss < 1.0})
    return verdicts


def raw_batch1_ms(results: dict[str, Any], task: str, variant: str) -> float | None:
    """Raw ORT's time per input at batch 1 (ms), from the chunk-sorted sweep: the faster of spinning on and off."""
    for raw in results["raw"]:
        if raw["task"] == task and raw["variant"] == variant and raw.get("sweep"):
            speeds = [raw["sweep"][key] for key in ("1", "1-nospin") if raw["sweep"].get(key)]
            if speeds:
                return round(1000.0 / max(speeds), 2)
    return None


def latency_verdicts(results: dict[str, Any]) -> list[dict[str, Any]]:
    verdicts = []
    for row in results["throughput"]:
        variant = row["system"].removeprefix("bertserve-")
        if row["concurrency"] != 1 or variant == row["system"] or row.get("p50_ms") is None:
            continue
        raw_ms = raw_batch1_ms(results, raw_task(row["task"]), variant)
        if raw_ms is None or infinity_job(row["task"]):
            continue
        goal = round(raw_ms + LATENCY_SLACK_MS, 2)
        verdicts.append({
            "task": row["task"],
            "target": f"bertserve {variant} c=1 p50 ms <= raw ORT batch-1 ({raw_ms:.2f} ms) + {LATENCY_SLACK_MS:g} ms",
            "goal": goal,
            "worst": row["p50_ms"],
            "met": row["p50_ms"] <= goal,
        })  # fmt: skip
    return verdicts
