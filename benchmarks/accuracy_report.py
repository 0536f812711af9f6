"""accuracy.json rows -> accuracy.md (a table beside the published anchors) and accuracy.png (dev metric per epoch)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.served_scores import PUBLISHED

log = logging.getLogger(__name__)
# The training metrics (fractions) shown beside the served value.
TRAINED_METRICS = ("accuracy", "f1", "exact_match", "mlm_top1_accuracy", "mlm_top5_accuracy")
# The metric each training history reports (fractions) for the curve.
# training reports fractions, except SQuAD's EM / F1 which it reports in percent (the official script's scale)
TRAINED_SCALE = {"squad": 1.0}
HISTORY_METRIC = {
    "sst2": "accuracy", "rte": "accuracy", "conll": "f1", "squad": "f1", "mlm": "mlm_top1_accuracy",
    "sst2-pretrained-here": "accuracy", "sst2-random-init": "accuracy", "sst2-cpu": "accuracy",
}  # fmt: skip


def trained_scale(task: str) -> float:
    """What turns the training metric of a row named ``<dataset>[-variant]`` into percent."""
    return TRAINED_SCALE.get(task.split("-")[0], 100.0)


def table(rows: list[dict[str, Any]]) -> list[str]:
    cells = []
    for row in rows:
        best = row.get("trained_best") or {}
        scale = trained_scale(row["task"])
        trained = ", ".join(f"{key} {scale * value:.2f}" for key, value in best.items() if key in TRAINED_METRICS)
        load = row.get("load_avg", {})
        cells.append((
            row["task"], row["metric"], row["precision"], f"**{row['value']:.2f}**",
            f"{row['target']:.1f}" if row.get("target") is not None else "reported",
            f"{trained} (epoch {best.get('epoch', '?')})", f"{row['wall_s'] / 60:.1f} min",
            f"{load.get('train_start', '?')} / {load.get('train_end', '?')}",
        ))  # fmt: skip
    columns = ("task", "metric", "precision", "served value:", "target:", "trained (best epoch, training's own eval)",
               "train wall:", "load avg (train start / end)")  # fmt: skip
    return report.table(columns, cells)


def pretraining_section(rows: list[dict[str, Any]]) -> list[str]:
    """The rows trained from the encoder pre-trained here and from its random twin, side by side."""
    rows = [row for row in rows if "pretraining" in row]
    if not rows:
        return []
    first = rows[0]["pretraining"]
    machine = rows[0]["device"].split(", served")[0].removeprefix("trained on ")
    lines = [
        "## Does pre-training help?",
        "",
        "`python -m benchmarks.accuracy --task sst2-pretrained-here --task sst2-random-init` reproduces it all.",
        f"Pre-trained here from scratch on the WikiText-2 train split: `{first['pretrain_command']}`: "
        f"{first['pretrain_wall_s'] / 60:.1f} min on {machine} "
        f"(load average {first['pretrain_load_avg']['start']} at the start, {first['pretrain_load_avg']['end']} at "
        f"the end), best held-out MLM at step {first['pretrain_best_step']}. The product's SST-2 recipe (the sst2 "
        "row's) then starts from those weights and from random weights of the same shape, tokenizer and seed; rows "
        "ending -lr1e-4 use the recipe first tried (lr 1e-4, 10 % warm-up); rows ending -tapt fine-tune after one MLM "
        "pass over SST-2's training sentences without labels (`python -m benchmarks.studies.pretraining_tapt`). "
        "MLM and NSP are scored on the held-out WikiText paragraphs (every sentence pair pre-training would build "
        "from them, the same masked positions for both encoders) before fine-tuning and before any MLM pass over "
        "SST-2.",
        "",
        *pretraining_differences(rows),
        "",
        "| row | encoder | SST-2 train sentences | precision | SST-2 dev accuracy (served) | "
        "MLM top-1 / top-5 (held-out WikiText) | NSP accuracy (held-out pairs) | fine-tune wall |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        held_out = row["pretraining"]["wikitext_heldout"]
        words = row["command"].split()
        sentences = words[words.index("--max-train-samples") + 1] if "--max-train-samples" in words else "all"
        lines.append(
            f"| {row['task']} | {row['pretraining']['init']} | {sentences} | {row['precision']} | "
            f"**{row['value']:.2f}** | "
            f"{100 * held_out['mlm_top1_accuracy']:.2f} / {100 * held_out['mlm_top5_accuracy']:.2f} | "
            f"{100 * held_out['nsp_accuracy']:.2f} ({held_out['pairs']:,}) | {row['wall_s'] / 60:.1f} min |"
        )
    return [*lines, ""]


def pretraining_differences(rows: list[dict[str, Any]]) -> list[str]:
    """SST-2 dev accuracy (served fp32) from the pre-trained encoder minus from its random twin, per recipe."""
    served: dict[str, dict[str, float]] = {}
    for row in rows:
        if row["precision"] != "fp32":
            continue
        for init in ("pretrained-here", "random-init"):
            if row["task"].startswith(f"sst2-{init}"):
                variant = row["task"].removeprefix(f"sst2-{init}") or "(all, product recipe)"
                served.setdefault(variant, {})[init] = row["value"]
    lines = [
        "| rows | pre-trained here | random weights | difference (target +3 on all sentences) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for variant, pair in served.items():
        if len(pair) == 2:
            difference = pair["pretrained-here"] - pair["random-init"]
            lines.append(
                f"| {variant} | {pair['pretrained-here']:.2f} | {pair['random-init']:.2f} | {difference:+.2f} |"
            )
    return lines


def int8_section(rows: list[dict[str, Any]]) -> list[str]:
    """int8 against fp32 per task: the accuracy it costs (issue 25 allows 0.5 points) and the speed it buys."""
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(row["task"], {})[row["precision"]] = row
    lines = [
        "## int8 against fp32",
        "",
        "Speed-up: the export's own measurement (bundle.json `parity.int8.speedup_vs_fp32`, sequences per second on "
        "one probe batch, B x T given); HTTP pass: seconds to score the eval set through the server, fp32 / int8.",
        "",
        "| task | fp32 | int8 | loss (points) | within 0.5 | int8 graph | nodes kept fp32 | speed-up (batch) "
        "| HTTP pass s |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |",
    ]
    for task, pair in by_task.items():
        if "fp32" not in pair or "int8" not in pair:
            continue
        fp32, int8 = pair["fp32"], pair["int8"]
        facts = int8.get("int8") or {}
        loss = fp32["value"] - int8["value"]
        batch = "x".join(str(size) for size in facts.get("speed_batch") or []) or "?"
        speedup = facts.get("speedup_vs_fp32")
        lines.append(
            f"| {task} | {fp32['value']:.2f} | {int8['value']:.2f} | {loss:+.2f} | {'yes' if loss <= 0.5 else 'no'} | "
            f"{facts.get('method', 'dynamic (not recorded)')} | {facts.get('kept_fp32', '?')} | "
            f"{f'{speedup:.2f}x' if speedup else '?'} ({batch}) | "
            f"{fp32.get('score_wall_s', '?')} / {int8.get('score_wall_s', '?')} |"
        )
    return [*lines, ""]


def anchors() -> list[str]:
    lines = ["| task | published model | value | source |", "| --- | --- | ---: | --- |"]
    for task, entries in PUBLISHED.items():
        lines += [f"| {task} | {e['model']} | {e['value']} {e['metric']} | {e['source']} |" for e in entries]
    return lines


def write(rows: list[dict[str, Any]], histories: dict[str, list[dict[str, Any]]], folder: Path) -> None:
    commands = sorted({row["command"] for row in rows})
    devices = sorted({row["device"] for row in rows})
    text = [
        "# Served accuracy of the fine-tuned recipes",
        "",
        "Every value is measured through HTTP (`/v1/<task>` of a running bertserve) on the exported bundle;",
        "`trained` is what `python -m training finetune` reported on the same eval set after its best epoch.",
        "",
        *table(rows),
        "",
        *int8_section(rows),
        *pretraining_section(rows),
        "Published anchors:",
        "",
        *anchors(),
        "",
        "Commands:",
        "",
        *[f"- `{command}`" for command in commands],
        "",
        "Hardware: " + "; ".join(devices),
        "",
        "![dev metric per epoch](accuracy.png)",
    ]
    (folder / "accuracy.md").write_text("\n".join(text) + "\n")
    plot(histories, folder / "accuracy.png")


def plot(histories: dict[str, list[dict[str, Any]]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is missing (pip install -e '.[bench]'): %s not drawn", path.name)
        return
    figure, axis = plt.subplots(figsize=(6, 4))
    for task, history in histories.items():
        metric = HISTORY_METRIC.get(task)
        scale = trained_scale(task)
        points = [(entry["epoch"], scale * entry[metric]) for entry in history if metric and metric in entry]
        if points:
            axis.plot(*zip(*points, strict=True), marker="o", label=f"{task} ({metric})")
    axis.set_xlabel("epoch")
    axis.set_ylabel("dev metric (%) - training's own evaluation")
    axis.set_title("Fine-tuning: dev metric per epoch")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
