"""Turn one benchmark run's results into results.json, results.md and PNG plots."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.datasets import REPO_ROOT
from benchmarks.targets import check_targets, raw_task

TASK_TITLES = {
    "sst2": "SST-2 classification", "squad": "SQuAD question answering", "conll": "CoNLL-2003 NER",
    "embeddings-1": "Embeddings, 1 sentence / request", "embeddings-32": "Embeddings, 32 sentences / request",
    "rerank": "Rerank, 1 query + 16 documents",
}  # fmt: skip
CHUNK_SORTED, GLOBAL_SORTED = "chunk-sorted", "global-sorted"  # raw_ort's two bounds
RAW_KEYS = {CHUNK_SORTED: "raw", GLOBAL_SORTED: "raw_global"}  # how ratios name them


def load_average(at_start: tuple[float, float, float]) -> dict[str, list[float]]:
    """The load average at a run's start (read then) and now, at its end: a run says what else was running."""
    return {"start": [round(v, 2) for v in at_start], "end": [round(v, 2) for v in os.getloadavg()]}


def shown_path(path: Path) -> str:
    """``path`` as a committed report writes it: relative to the checkout, else only its name (no machine paths)."""
    return str(path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else Path(path.name))


def load_parser(
    doc: str | None, rounds: int, duration_s: float = 10.0, models: str | None = None
) -> argparse.ArgumentParser:
    """The options every interleaved load benchmark takes: --duration, --warmup, --rounds, --out (its own added);
    with ``models`` (what a bundle must be), --model NAME=BUNDLE, once or more."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if models is not None:
        parser.add_argument("--model", action="append", required=True, help=f"NAME=BUNDLE ({models})")
    parser.add_argument("--duration", type=float, default=duration_s, help="seconds of load per point")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before each point")
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds; each figure is the median")
    parser.add_argument("--out", type=Path, required=True, help="the report's path without .json / .md")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return parser


def tree_commit() -> str:
    """The short commit of the tree the benchmark runs from (what its report names)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A markdown table's lines; a column named with a trailing ``:`` holds figures (right-aligned)."""
    lines = [
        "| " + " | ".join(column.removesuffix(":") for column in columns) + " |",
        "| " + " | ".join("---:" if column.endswith(":") else "---" for column in columns) + " |",
    ]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def page(title: str, intro: str, *blocks: list[str]) -> str:
    """A report's markdown: its title, one paragraph on how it was measured, then its blocks (tables) apart."""
    lines = [f"# {title}", "", intro]
    for block in blocks:
        lines += ["", *block]
    return "\n".join(lines) + "\n"


def finish_load_report(
    args: argparse.Namespace,
    at_start: tuple[float, float, float],
    markdown: Callable[[dict[str, Any]], str],
    **figures: Any,
) -> int:
    """Write an interleaved load benchmark's report (its tree, rounds, seconds per point and load averages, then
    ``figures``) as ``args.out``.json and .md; the command's exit status."""
    report = {"tree": tree_commit(), "rounds": args.rounds, "duration_s": args.duration,
              "load_avg": load_average(at_start), **figures}  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


def write_report(out: Path, figures: dict[str, Any], text: str) -> None:
    """``out``.json (the figures, stamped with when they were finished) and ``out``.md (``text``, also on stdout):
    what a benchmark commits."""
    figures.setdefault("finished", time.strftime("%Y-%m-%d %H:%M"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(figures, indent=2) + "\n")
    out.with_suffix(".md").write_text(text)
    sys.stdout.write(text)


def raw_method(raw: dict[str, Any]) -> str:
    """Which bound a raw row is; rows of runs before the global-sorted bound existed are chunk-sorted."""
    return str(raw.get("method", CHUNK_SORTED))


def compare_limits(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per task and variant: both raw bounds (sequences/s) and which one is higher."""
    speeds = {(r["task"], r["variant"], raw_method(r)): r["sequences_per_s"] for r in results["raw"]}
    limits = []
    for task, variant in sorted({(task, variant) for task, variant, _ in speeds}):
        chunk, global_ = speeds.get((task, variant, CHUNK_SORTED)), speeds.get((task, variant, GLOBAL_SORTED))
        higher = None
        if chunk and global_:
            higher = GLOBAL_SORTED if global_ > chunk else CHUNK_SORTED
        limits.append({"task": task, "variant": variant, CHUNK_SORTED: chunk, GLOBAL_SORTED: global_,
                       "higher": higher, "global/chunk": ratio(global_, chunk)})  # fmt: skip
    return limits


def machine_facts() -> dict[str, Any]:
    import onnxruntime

    facts: dict[str, Any] = {
        "load_average_at_start": [round(value, 1) for value in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "onnxruntime": onnxruntime.__version__,
    }
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Flags"):
                value = value.strip()
                if key.strip() == "Flags":
                    wanted = ("avx512_vnni", "avx512f", "amx")
                    value = " ".join(flag for flag in value.split() if flag.startswith(wanted))
                facts[key.strip()] = value
    except (OSError, subprocess.CalledProcessError):
        facts["cpu"] = platform.processor()
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        tracked = ["service", "contract", "model_export"]
        status = ["git", "status", "--porcelain", "--", *tracked]
        dirty = subprocess.run(status, capture_output=True, text=True, check=True)
        facts["git"] = head.stdout.strip() + (" (source modified)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()[0].split()
        facts["memory_gib"] = round(int(meminfo[1]) / 2**20, 1)
    except (OSError, IndexError, ValueError):
        pass
    return facts


def row_lookup(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    return {(row["task"], row["system"], row["concurrency"]): row for row in rows}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 2)


def compute_ratios(results: dict[str, Any]) -> list[dict[str, Any]]:
    """bertserve against each reference, per task and concurrency (throughput ratios)."""
    rows = row_lookup(results["throughput"])
    raw_speeds = {(r["task"], RAW_KEYS[raw_method(r)], r["variant"]): r["sequences_per_s"] for r in results["raw"]}
    ratios = []
    for task in sorted({row["task"] for row in results["throughput"]}):
        raw = {f"{method}_{variant}": raw_speeds.get((raw_task(task), method, variant))
               for method in RAW_KEYS.values() for variant in ("fp32", "int8")}  # fmt: skip
        for concurrency in results["settings"]["concurrency"]:

            def speed(system: str, task: str = task, concurrency: int = concurrency) -> float | None:
                row = rows.get((task, system, concurrency))
                return row["sequences_per_s"] if row else None

            entry = {
                "task": task,
                "concurrency": concurrency,
                "bertserve_fp32/raw_fp32": ratio(speed("bertserve-fp32"), raw["raw_fp32"]),
                "bertserve_int8/raw_int8": ratio(speed("bertserve-int8"), raw["raw_int8"]),
                "bertserve_fp32/raw_global_fp32": ratio(speed("bertserve-fp32"), raw["raw_global_fp32"]),
                "bertserve_int8/raw_global_int8": ratio(speed("bertserve-int8"), raw["raw_global_int8"]),
                "bertserve_fp32/naive": ratio(speed("bertserve-fp32"), speed("naive")),
                "bertserve_int8/naive": ratio(speed("bertserve-int8"), speed("naive")),
                "bertserve_fp32/infinity": ratio(speed("bertserve-fp32"), speed("infinity")),
                "bertserve_int8/infinity": ratio(speed("bertserve-int8"), speed("infinity")),
                "bertserve_int8/bertserve_fp32": ratio(speed("bertserve-int8"), speed("bertserve-fp32")),
                "raw_int8/raw_fp32": ratio(raw["raw_int8"], raw["raw_fp32"]),
            }
            ratios.append({key: value for key, value in entry.items() if value is not None})
    return ratios


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(results: dict[str, Any]) -> str:
    settings = results["settings"]
    lines = [
        "# bertserve benchmark results",
        "",
        f"Produced by `{results['command']}` on {results['started']} (took {results.get('wall_minutes', '?')} min).",
        "",
        *(
            f"Kept {', '.join(run['kept'])} from `{run['command']}` on {run['started']} "
            f"(load average then: {run.get('load_average')})."
            for run in results.get("earlier_runs", [])
        ),
        "",
        "Machine: " + ", ".join(f"{key}: {value}" for key, value in results["machine"].items()),
        "",
        f"Load: wrk, one thread, {settings['duration_s']:.0f} s per point after a "
        f"{settings['warmup_s']:.0f} s warm-up, "
        "each connection keeps one request in flight (concurrency = connections); every request carries one input "
        "(a sentence or a question/context pair) taken in rotation from the evaluation data, except embeddings-32 "
        "(32 sentences per request) and rerank (1 query + 16 documents); sequences/s counts sentences and "
        "(query, document) pairs. "
        "Raw ORT: one in-process session, length-sorted batches, tokenization included, two bounds: "
        "chunk-sorted (inputs sorted in chunks of 512, QA 128; the best batch 1..64 and spinning on/off of a sweep on "
        "a sample; min(2, cores) intra-op threads) and global-sorted (the whole input set tokenized and sorted by "
        "length at once; the best of batch 8/16/32/64 over the whole set; onnxruntime's default threading, spinning "
        "allowed). "
        "CPU ms / request: the server's CPU time (utime + stime from /proc of its process and its children) over the "
        "measured window, divided by the requests wrk counted; cores busy: that CPU time over the window's wall time "
        "(wrk runs on the same cores). For raw ORT both count this process's CPU time per input.",
        "",
        *limits_markdown(results.get("limits", [])),
        "## Throughput and latency",
        "",
        "| task | system | concurrency | sequences/s | p50 ms | p99 ms | errors | padding waste | CPU ms / request "
        "| cores busy |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for raw in results["raw"]:
        lines.append(
            f"| {raw['task']} | raw ORT {raw['variant']} {raw_method(raw)} (batch {raw['batch_size']}"
            f"{'' if raw.get('spin', True) else ', no spinning'}) | - | "
            f"{fmt(raw['sequences_per_s'])} | - | - | 0 | {fmt(100 * raw['padding_waste'])}% | "
            f"{fmt(raw.get('cpu_ms_per_input'), 2)} | {fmt(raw.get('cores_busy'), 2)} |"
        )
    for row in results["throughput"]:
        waste = row.get("padding_waste")
        lines.append(
            f"| {row['task']} | {row['system']} | {row['concurrency']} | {fmt(row['sequences_per_s'])} | "
            f"{fmt(row['p50_ms'])} | {fmt(row['p99_ms'])} | {row['errors']} | "
            f"{fmt(100 * waste) + '%' if waste is not None else '-'} | {fmt(row.get('cpu_ms_per_request'), 2)} | "
            f"{fmt(row.get('server_cores_busy'), 2)} |"
        )
    unfinished = [f"{row['task']} {row['system']} c={row['concurrency']}" for row in results["throughput"]
                  if row["requests"] == 0]  # fmt: skip
    if unfinished:
        lines += ["", f"No request finished within the measured window ({', '.join(unfinished)}): a request "
                  "took longer than --duration there, so those points and their ratios are missing."]  # fmt: skip
    lines += ["", "## Ratios (throughput)", ""]
    keys = sorted({key for entry in results["ratios"] for key in entry} - {"task", "concurrency"})
    lines += ["| task | concurrency | " + " | ".join(keys) + " |", "| --- | ---: |" + " ---: |" * len(keys)]
    for entry in results["ratios"]:
        lines.append(
            f"| {entry['task']} | {entry['concurrency']} | " + " | ".join(fmt(entry.get(k), 2) for k in keys) + " |"
        )
    lines += ["", "## Targets (each judged at the worst of the concurrencies it names)", "",
              "| task | target | goal | worst | met |",
              "| --- | --- | ---: | ---: | --- |"]  # fmt: skip
    for verdict in results["targets"]:
        lines.append(
            f"| {verdict['task']} | {verdict['target']} | {fmt(verdict['goal'], 2)} | {fmt(verdict['worst'], 2)} | "
            f"{'yes' if verdict['met'] else '**no**'} |"
        )
    lines += accuracy_markdown(results.get("accuracy", {}))
    if results.get("profile"):
        samples = results["profile"].get("samples", 0)
        lines += ["", "## Where bertserve's time goes (py-spy, SST-2 fp32, concurrency 32)", ""]
        lines += [f"{samples} samples of the server's busy threads (py-spy --threads, idle threads left out).", ""]
        lines += ["| share of samples | function (leaf frame) |", "| ---: | --- |"]
        for item in results["profile"]["top_leaf_frames"]:
            lines.append(f"| {item['share']:.1f}% | `{item['frame']}` |")
    lines += ["", "Plots: `throughput.png` (throughput vs concurrency), `latency.png` (p50/p99 vs concurrency).", ""]
    return "\n".join(lines)


def limits_markdown(limits: list[dict[str, Any]]) -> list[str]:
    if not limits:
        return []
    lines = ["## The two raw ORT bounds", "",
             "Ratios to raw ORT name the chunk-sorted bound `raw_*` and the global-sorted one `raw_global_*`; "
             "targets against raw ORT count the ratio to the higher one.", "",
             "| task | variant | chunk-sorted seq/s | global-sorted seq/s | global / chunk | higher |",
             "| --- | --- | ---: | ---: | ---: | --- |"]  # fmt: skip
    for limit in limits:
        lines.append(
            f"| {limit['task']} | {limit['variant']} | {fmt(limit[CHUNK_SORTED])} | {fmt(limit[GLOBAL_SORTED])} | "
            f"{fmt(limit['global/chunk'], 2)} | {limit['higher'] or '-'} |"
        )
    return [*lines, ""]


def accuracy_markdown(accuracy: dict[str, Any]) -> list[str]:
    if not accuracy:
        return ["", "Served accuracy of the full-data fine-tunes, fp32 and int8 through HTTP: `accuracy.md` "
                "(`make accuracy`)."]  # fmt: skip
    lines = ["", "## Served accuracy (through HTTP)", ""]
    lines += ["| dataset | metric | fp32 | int8 | examples | published reference |"]
    lines += ["| --- | --- | ---: | ---: | ---: | --- |"]
    for scores in accuracy.values():
        metric = scores["metric"]
        published = "; ".join(
            f"{ref['model']}: {ref['value']} {ref['metric']} ({ref['source']})" for ref in scores.get("published", [])
        )
        extra = ""
        if "exact_match" in scores.get("fp32", {}):
            extra = f" (EM {fmt(scores['fp32']['exact_match'])} / {fmt(scores.get('int8', {}).get('exact_match'))})"
        lines.append(
            f"| {scores['dataset']} | {metric}{extra} | {fmt(scores.get('fp32', {}).get(metric))} | "
            f"{fmt(scores.get('int8', {}).get(metric))} | {scores.get('fp32', {}).get('examples', '-')} | {published} |"
        )
    lines += ["", "How each model was fine-tuned (from all-MiniLM-L6-v2, on this 2-core CPU):", ""]
    lines += [f"- {scores['dataset']}: {scores.get('training', '?')}" for scores in accuracy.values()]
    return lines


def task_axes(plt: Any, count: int, columns: int = 3) -> tuple[Any, list[Any]]:
    """One panel per task, at most ``columns`` a row; panels left over are hidden."""
    rows = -(-count // columns)
    width = min(count, columns)
    figure, grid = plt.subplots(rows, width, figsize=(5.5 * width, 4.2 * rows), squeeze=False)
    axes = [axis for row in grid for axis in row]
    for axis in axes[count:]:
        axis.set_visible(False)
    return figure, axes


def plot(results: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [task for task in TASK_TITLES if any(row["task"] == task for row in results["throughput"])]
    if not tasks:
        return []
    written = []
    figure, axes = task_axes(plt, len(tasks))
    for axis, task in zip(axes, tasks, strict=False):
        systems = sorted({row["system"] for row in results["throughput"] if row["task"] == task})
        for system in systems:
            rows = sorted((r for r in results["throughput"] if r["task"] == task and r["system"] == system),
                          key=lambda r: r["concurrency"])  # fmt: skip
            axis.plot([r["concurrency"] for r in rows], [r["sequences_per_s"] for r in rows], marker="o", label=system)
        for raw in (r for r in results["raw"] if r["task"] == raw_task(task)):
            axis.axhline(raw["sequences_per_s"], linestyle="--" if raw_method(raw) == CHUNK_SORTED else ":",
                         linewidth=1, color="grey" if raw["variant"] == "fp32" else "black",
                         label=f"raw ORT {raw['variant']} {raw_method(raw)}")  # fmt: skip
        axis.set_ylim(bottom=0)
        _label_concurrency_axis(axis, task, "sequences / s", legend_size=7)
    written.append(_save(plt, figure, out_dir / "throughput.png"))

    figure, axes = task_axes(plt, len(tasks))
    for axis, task in zip(axes, tasks, strict=False):
        systems = sorted({row["system"] for row in results["throughput"] if row["task"] == task})
        for index, system in enumerate(systems):
            rows = sorted((r for r in results["throughput"] if r["task"] == task and r["system"] == system),
                          key=lambda r: r["concurrency"])  # fmt: skip
            color = f"C{index}"
            xs = [r["concurrency"] for r in rows]
            axis.plot(xs, [r["p50_ms"] for r in rows], marker="o", color=color, label=f"{system} p50")
            axis.plot(xs, [r["p99_ms"] for r in rows], marker="x", linestyle=":", color=color, label=f"{system} p99")
        axis.set_yscale("log")
        _label_concurrency_axis(axis, task, "latency (ms)", legend_size=6)
    written.append(_save(plt, figure, out_dir / "latency.png"))
    return written


def _label_concurrency_axis(axis: Any, task: str, ylabel: str, legend_size: int) -> None:
    """A task's panel: concurrency on a log2 x axis, the task as title, a grid and the legend."""
    axis.set_xscale("log", base=2)
    axis.set_xlabel("concurrency (connections)")
    axis.set_ylabel(ylabel)
    axis.set_title(TASK_TITLES[task])
    axis.grid(alpha=0.3)
    axis.legend(fontsize=legend_size)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results["limits"] = compare_limits(results)
    results["ratios"] = compute_ratios(results)
    results["targets"] = check_targets(results)
    json_path = out_dir / "results.json"
    json_path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    md_path = out_dir / "results.md"
    md_path.write_text(markdown(results))
    return [json_path, md_path, *plot(results, out_dir)]
