"""The markdown of ``benchmarks.gpu``'s results: the card, the answers check, the speed tables and the targets."""

from __future__ import annotations

from typing import Any

from benchmarks.gpu_processes import markdown_lines as processes_lines

TARGETS = (
    "served throughput at c>=32 >= 0.9x the raw CUDA loop (best batch)",
    "c=1 p50 within 1 ms of the raw batch-1 call",
    ">= 3x the torch pipeline (fp16, batch 32) at c=32 on BERT-base, 128 and 512 tokens",
    "top-1 agreement with the CPU fp32 bundle on SST-2 dev >= 99.5 %",
    "embedding cosine with the CPU fp32 bundle >= 0.999 (every sentence)",
)


def _fig(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def target_rows(results: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(target, workload, figure, met) for every target the results can judge."""
    rows: list[tuple[str, str, str, bool | None]] = []
    raw, served, torch = results.get("raw_cuda", {}), results.get("served", {}), results.get("torch", {})
    torch = {name: figures for name, figures in torch.items() if isinstance(figures, dict)}
    for name, points in served.items():
        best_raw = raw.get(name, {}).get("sequences_per_s")
        best_served = max((points[key]["sequences_per_s"] or 0.0) for key in ("c32", "c128"))
        if best_raw:
            ratio = best_served / best_raw
            rows.append((TARGETS[0], name, f"{ratio:.2f}x ({best_served:,.0f} / {best_raw:,.0f} seq/s)", ratio >= 0.9))
        batch1, p50 = raw.get(name, {}).get("batch1_p50_ms"), points["c1"]["p50_ms"]
        if batch1 is not None and p50 is not None:
            rows.append((TARGETS[1], name, f"{p50 - batch1:+.2f} ms ({p50:.2f} vs {batch1:.2f})", p50 - batch1 <= 1.0))
        rate = torch.get(name, {}).get("sequences_per_s", {}).get("32")
        if name.startswith("base") and rate and points["c32"]["sequences_per_s"]:
            ratio = points["c32"]["sequences_per_s"] / rate
            rows.append((TARGETS[2], name, f"{ratio:.2f}x ({points['c32']['sequences_per_s']:,.0f} / {rate:,.0f})",
                         ratio >= 3.0))  # fmt: skip
    answers = results.get("answers")
    if answers:
        agreement, cosine = answers["top1_agreement_pct"], answers["embedding_cosine_min"]
        rows.append((TARGETS[3], "sst2", f"{agreement:.2f} %", agreement >= 99.5))
        rows.append((TARGETS[4], "embed", f"min {cosine:.5f}", cosine >= 0.999))
    return rows


def markdown(results: dict[str, Any]) -> str:
    card = results.get("card", {})
    lines = ["# Serving on a GPU (benchmarks.gpu)", ""]
    lines += [f"Card: {card.get('gpu', '-')} (name, driver, memory); onnxruntime {card.get('onnxruntime', '-')}; "
              f"{card.get('cpu_count', '-')} CPU cores. Load average at start {results.get('load_avg_start')}, "
              f"end {results.get('load_avg_end')}.", ""]  # fmt: skip
    lines += ["Commands:", "", *[f"    {command}" for command in results.get("commands", [])], ""]
    if "server_command" in results:
        lines += ["Server:", "", f"    python {results['server_command']}", ""]
    rows = target_rows(results)
    if rows:
        lines += ["## Targets", "", "| target | workload | figure | met |", "| --- | --- | --- | --- |"]
        lines += [f"| {target} | {name} | {figure} | {'yes' if met else 'NO'} |" for target, name, figure, met in rows]
        lines.append("")
    if results.get("answers"):
        lines += ["## Answers against the CPU fp32 bundle", ""]
        lines += [f"- {key}: {value}" for key, value in results["answers"].items()] + [""]
    raw, served, torch = results.get("raw_cuda", {}), results.get("served", {}), results.get("torch", {})
    if raw:
        lines += ["## Speed (sequences/s; p50 in ms)", "",
                  "| workload | raw best (batch) | raw batch-1 p50 | served c=1 p50 | c=32 | c=128 | c=32 x16 inputs "
                  "| torch pipeline b32 | torch batch-1 p50 |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        for name, figures in raw.items():
            points, peer = served.get(name, {}), torch.get(name, {}) if name in torch else {}

            def cell(key: str, field: str = "sequences_per_s", points: dict[str, Any] = points) -> str:
                return _fig(points.get(key, {}).get(field))

            lines.append(
                f"| {name} | {_fig(figures['sequences_per_s'])} ({figures['best_batch_size']}) "
                f"| {_fig(figures['batch1_p50_ms'], 2)} | {cell('c1', 'p50_ms')} | {cell('c32')} | {cell('c128')} "
                f"| {cell('c32x16')} | {_fig(peer.get('sequences_per_s', {}).get('32'))} "
                f"| {_fig(peer.get('batch1_p50_ms'), 2)} |"
            )
        lines.append("")
        lines += ["Raw sweeps (batch size: sequences/s):", ""]
        lines += [f"- {name}: {figures['sweep']}" for name, figures in raw.items()] + [""]
    lines += core_lines(results)
    lines += processes_lines(results)
    if results.get("served_models"):
        lines += ["Served models (device, tuned batching):", ""]
        lines += [f"- {name}: {facts}" for name, facts in results["served_models"].items()] + [""]
    if results.get("shapes"):
        from benchmarks.gpu_shapes import markdown as shapes_markdown

        lines += ["#" + shapes_markdown(results["shapes"])]
    return "\n".join(lines) + "\n"


def core_lines(results: dict[str, Any]) -> list[str]:
    """Time inside the model for a row: the raw loop at batch 32, the service's engine in process (no HTTP) and the
    server, at c=32: where a batch slows, in the session or behind the server's HTTP."""
    core, raw, served = results.get("core", {}), results.get("raw_cuda", {}), results.get("served", {})
    if not core:
        return []
    lines = ["## In process: the service's engine without HTTP (model ms a row at c=32)", "",
             "Engine: batches padded to the service's shape buckets (its GPU default); exact: batches run as they "
             "form (`--no-shape-buckets`).", "",
             "| workload | raw ms/row (batch 32) | engine c=1 seq/s | engine c=32 seq/s | engine rows/batch "
             "| engine model ms/row | exact c=32 seq/s | exact rows/batch | exact model ms/row | served c=32 seq/s "
             "| served rows/batch | served model ms/row |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name, points in core.items():
        rate32 = raw.get(name, {}).get("sweep", {}).get("32")
        inside = served.get(name, {}).get("c32", {})
        server = inside.get("server") or {}
        rows, run_ms = server.get("rows_per_batch"), server.get("run_ms_per_batch")
        exact = points.get("exact-c32", {})
        lines.append(
            f"| {name} | {_fig(1000 / rate32 if rate32 else None, 3)} | {_fig(points['c1']['sequences_per_s'])} "
            f"| {_fig(points['c32']['sequences_per_s'])} | {_fig(points['c32']['rows_per_batch'])} "
            f"| {_fig(points['c32']['model_ms_per_row'], 3)} | {_fig(exact.get('sequences_per_s'))} "
            f"| {_fig(exact.get('rows_per_batch'))} | {_fig(exact.get('model_ms_per_row'), 3)} "
            f"| {_fig(inside.get('sequences_per_s'))} | {_fig(rows)} "
            f"| {_fig(run_ms / rows if run_ms and rows else None, 3)} |"
        )
    return [*lines, ""]
