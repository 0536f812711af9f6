"""The big-model table: export, start-up and memory per bundle; raw ORT against served per bundle and length."""

from __future__ import annotations

from typing import Any


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(top: float | None, bottom: float | None) -> str:
    return "-" if top is None or not bottom else f"{top / bottom:.2f}x"


def _tokens(values: list[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def bundle_rows(bundles: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | quant | ONNX MB | export s | export peak RSS GB | start-up s | RSS at ready MB | RSS / ONNX | "
        "RSS after load MB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry in bundles:
        export, served, onnx = entry["export"], entry["served"], entry["onnx_bytes"]
        reused = " (earlier)" if export.get("reused") else ""
        lines.append(
            f"| {entry['size']} | {entry['quantization']} | {_num(onnx / 1e6, 0)} | {_num(export['wall_s'])}{reused} | "
            f"{_num(export['peak_rss_bytes'] / 1e9, 2)} | {_num(served['startup_s'])} | "
            f"{_num(served['rss_ready_bytes'] / 1e6, 0)} | {_ratio(served['rss_ready_bytes'], onnx)} | "
            f"{_num(served['rss_after_load_bytes'] / 1e6, 0)} |"
        )
    return lines


def speed_rows(bundles: list[dict[str, Any]], concurrency: int | list[int]) -> list[str]:
    points = concurrency if isinstance(concurrency, list) else [concurrency]
    served_heads = "".join(f"served c={c} seq/s | c={c} / raw | " for c in points)
    lines = [
        f"| model | quant | tokens | raw seq/s (batch) | {served_heads}"
        "raw batch-1 median ms | served c=1 p50 ms | c=1 minus raw ms | c=1 / raw | answers |",
        "| --- | --- | ---: | ---: | " + "---: | ---: | " * len(points) + "---: | ---: | ---: | ---: | --- |",
    ]
    for entry in bundles:
        for length, raw in entry["raw"].items():
            served = entry["served"]["lengths"][length]
            cells = "".join(
                f"{_num(served.get(f'c{c}_sequences_per_s'), 2)} | "
                f"{_ratio(served.get(f'c{c}_sequences_per_s'), raw['sequences_per_s'])} | "
                for c in points
            )
            statuses = "; ".join(f"c={c} {served.get(f'c{c}_statuses')}" for c in [*points, 1])
            p50, b1 = served["c1_p50_ms"], raw["batch1_median_ms"]
            lines.append(
                f"| {entry['size']} | {entry['quantization']} | {_tokens(entry['tokens'][length])} | "
                f"{_num(raw['sequences_per_s'], 2)} ({raw['best_batch_size']}) | {cells}{_num(b1)} | {_num(p50)} | "
                f"{_num(None if p50 is None else p50 - b1)} | {_ratio(p50, b1)} | {statuses} |"
            )
    return lines


def _rounds(settings: dict[str, Any]) -> str:
    rounds = settings.get("rounds", 1)
    return f"; {rounds} rounds (raw, then a fresh server), the tables give each figure's median" if rounds > 1 else ""


def round_rows(bundles: list[dict[str, Any]], concurrency: int | list[int]) -> list[str]:
    """Each round's served / raw (raw measured just before its server ran), where there were rounds."""
    concurrency = concurrency if isinstance(concurrency, list) else [concurrency]
    lines: list[str] = []
    for entry in bundles:
        for length in entry["raw"]:
            ratios = {c: [served_over_raw(r, length, c) for r in entry.get("rounds", [])] for c in concurrency}
            if not any(ratios.values()):
                continue
            cells = "; ".join(f"c={c} " + ", ".join(f"{x:.3f}" for x in values) + f" (median {_median(values):.3f})"
                              for c, values in ratios.items())  # fmt: skip
            lines.append(f"- {entry['size']} {entry['quantization']}, {length} tokens, served / raw by round: {cells}")
    return [*lines, ""] if lines else []


def served_over_raw(round_: dict[str, Any], length: str, clients: int) -> float:
    served = round_["served"]["lengths"][length].get(f"c{clients}_sequences_per_s") or 0.0
    return float(served / round_["raw"][length]["sequences_per_s"])


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def markdown(results: dict[str, Any]) -> str:
    settings = results["settings"]
    bundles = results["bundles"]
    wall = f", {results['wall_s'] / 60:.1f} min" if "wall_s" in results else " (unfinished)"
    return "\n".join(
        [
            "# Big models: BERT-base and BERT-large (random weights) through export and serving",
            "",
            f"Command: `{results['command']}` (started {results['started_utc']} UTC{wall}; "
            f"{results['cpu_count']} cores). Load average (1, 5, 15 min) at start {results['load_avg']['start']}, "
            f"at end {results['load_avg'].get('end')}. Server: `python -m service` defaults"
            f"{' + `' + settings['server_args'] + '`' if settings['server_args'] else ''}"
            f"{', env ' + str(results['server_env']) if results['server_env'] else ''}.",
            "",
            f"Each point {settings['duration']:g} s. Raw: one in-process onnxruntime session (min(2, cores) intra-op "
            f"threads, tokenization included), the best of batch sizes {settings['raw_batch_sizes']}, and the median "
            f"of batch-1 runs{_rounds(settings)}. Served: c={settings['concurrency']} throughput (200 answers/s "
            f"between completions after {settings['warmup']:g} s of warm-up), c=1 p50; one input per request. "
            "Start-up: from the process start to /health/ready answering (polled every 0.5 s). Export: `python -m "
            "model_export`, wall time and peak RSS (ru_maxrss of that process).",
            "",
            *bundle_rows(bundles),
            "",
            *speed_rows(bundles, settings["concurrency"]),
            "",
            *round_rows(bundles, settings["concurrency"]),
        ]
    )
