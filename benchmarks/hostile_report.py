"""The hostile benchmark's figures: the good client's summary, the issue's done-when checks, the markdown."""

from __future__ import annotations

from typing import Any

from benchmarks.overload_client import Tally

RSS_TOLERANCE = 0.10  # RSS "back to its start": within 10 % of it


def percentile_ms(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000, 1)


def good_summary(tally: Tally) -> dict[str, Any]:
    return {
        "requests": sum(tally.statuses.values()),
        "statuses": dict(tally.statuses.most_common()),
        "p50_ms": percentile_ms(tally.admitted_latencies, 0.50),
        "p99_ms": percentile_ms(tally.admitted_latencies, 0.99),
        "max_ms": percentile_ms(tally.admitted_latencies, 1.0),
        "errors": dict(tally.errors),
    }


def phase(report: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((item for item in report["phases"] if item["name"] == name), None)


def verdicts(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's done-when, each as a figure and whether it holds (phases not run are left out)."""
    calm = phase(report, "calm")
    assert calm is not None, "the calm phase always runs"
    calm_p99 = calm["good"]["p99_ms"]
    checks: dict[str, Any] = {"calm_p99_ms": calm_p99}
    doubled = phase(report, "slow bodies 2x")
    if doubled is not None:
        good = doubled["good"]
        checks["2x_good_only_200"] = set(good["statuses"]) == {"200"}
        checks["2x_good_p99_ms"] = good["p99_ms"]
        checks["2x_good_p99_within_2x_calm"] = good["p99_ms"] is not None and good["p99_ms"] <= 2 * calm_p99
    for item in report["phases"]:
        if item["name"].startswith("slow bodies"):
            hostile = item["hostile"]
            checks[f"{item['name']}: ended within deadline + 5 s"] = (
                f"{hostile['ended_within_deadline_plus_5s']} of {hostile['senders']}"
            )
    json_phase = phase(report, "hostile JSON")
    if json_phase is not None:
        deep = {name: item["statuses"] for name, item in json_phase["hostile"].items() if "deep" in name}
        checks["nested_json_400"] = all(set(statuses) == {"400"} for statuses in deep.values())
    start, end = calm["server_after"], report["server_at_end"]
    checks["fds_start_end"] = [start["fds"], end["fds"]]
    checks["fds_back_to_start"] = end["fds"] <= start["fds"]
    checks["rss_mb_start_end"] = [start["rss_mb"], end["rss_mb"]]
    checks["rss_back_to_start"] = end["rss_mb"] <= start["rss_mb"] * (1 + RSS_TOLERANCE)
    return checks


def statuses_text(statuses: dict[str, int]) -> str:
    return ", ".join(f"{count} x {status}" for status, count in statuses.items()) or "none"


def hostile_text(item: dict[str, Any]) -> str:
    hostile = item["hostile"]
    if not hostile:
        return ""
    if "statuses" in hostile:
        text = f"{statuses_text(hostile['statuses'])}; {hostile['closed_by_server']} closed by the server"
        if "ended_within_deadline_plus_5s" in hostile:
            text += f"; slowest {hostile['max_seconds']} s"
        if "server_while_held" in hostile:
            held = hostile["server_while_held"]
            text += f"; server while held: {held['rss_mb']} MB, {held['fds']} fds"
        return text
    return "; ".join(f"{name}: {statuses_text(part['statuses'])}" for name, part in hostile.items())


def markdown(report: dict[str, Any]) -> str:
    server, checks = report["server"], report["verdicts"]
    calm = phase(report, "calm")
    assert calm is not None
    lines = [
        "# Hostile clients (`python -m benchmarks.hostile`)",
        "",
        f"Command: `{report['command']}`, started {report['started_utc']} UTC, {report['wall_s']} s in all; load "
        f"average {report['load_average_start']} at the start and {report['load_average_end']} at the end (2 cores). "
        f"Server: `python -m service` on 127.0.0.1 with model {report['model']['name']} "
        f"(`{report['model']['path']}`), default settings: in-flight cap {server['max_concurrent_requests']}, body "
        f"deadline {server['body_timeout_s']:g} s. Ready: {report['server_at_ready']['rss_mb']} MB RSS, "
        f"{report['server_at_ready']['fds']} fds; end: {report['server_at_end']['rss_mb']} MB, "
        f"{report['server_at_end']['fds']} fds. Server log: {report['server_log']['errors']} ERROR lines, "
        f"{report['server_log']['tracebacks']} tracebacks.",
        "",
        "A good client sends one request every 50 ms on a keep-alive connection during every phase; its p50 / p99 "
        f"count its 200s (calm: {calm['good']['p50_ms']} / {calm['good']['p99_ms']} ms).",
        "",
        "| phase | hostile clients | what they got | good client | good p50 / p99 ms | server RSS MB | server fds |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for item in report["phases"]:
        good, before, after = item["good"], item["server_before"], item["server_after"]
        lines.append(
            f"| {item['name']} | {item['description']} | {hostile_text(item)} | "
            f"{statuses_text(good['statuses'])} | {good['p50_ms']} / {good['p99_ms']} | "
            f"{before['rss_mb']} -> {after['rss_mb']} | {before['fds']} -> {after['fds']} |"
        )
    lines += ["", "Done when (issue 31):", ""]
    lines += [f"- {name}: {value}" for name, value in checks.items()]
    json_phase = phase(report, "hostile JSON")
    if json_phase is not None:
        lines += ["", "Hostile JSON, each body on its own connection:", "", "| body | statuses | median ms |"]
        lines += ["| --- | --- | ---: |"]
        for name, part in json_phase["hostile"].items():
            lines.append(f"| {name} | {statuses_text(part['statuses'])} | {part['median_ms']} |")
    return "\n".join(lines) + "\n"
