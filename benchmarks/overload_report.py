"""The overload check's figures and report: goodput against capacity, admitted latency against the deadline, the
answers by status, Retry-After of the 429s, connection errors, the server's RSS, and whether the targets hold.

Targets (issue 21, item 2): goodput (200 answers/s) >= 0.9 x the capacity measured at c=32; p99 of the admitted
(200) requests <= half the deadline; no 5xx; no connection error and no client timeout; RSS growth < 5 % (from 10 %
of the run to its end).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks.overload_client import Tally, percentile, throughput_between

TARGET_GOODPUT_RATIO = 0.9
TARGET_P99_OF_DEADLINE = 0.5
TARGET_RSS_GROWTH = 0.05
RSS_START_FRACTION = 0.1  # "start" RSS, and the start of the goodput window: once the overload has run this long


def status_classes(statuses: Counter[str] | dict[str, int]) -> dict[str, int]:
    """Counts of 200, 429, 413, every other 4xx, 5xx, and the client-side outcomes."""
    classes = dict.fromkeys(("200", "429", "413", "other_4xx", "5xx", "connection_error", "client_timeout",
                             "client_skipped"), 0)  # fmt: skip
    for status, count in statuses.items():
        if status in classes:
            classes[status] += count
        elif status.isdigit() and 500 <= int(status) < 600:
            classes["5xx"] += count
        elif status.isdigit() and 400 <= int(status) < 500:
            classes["other_4xx"] += count
    return classes


def retry_after_distribution(counts: Counter[str]) -> dict[str, int]:
    """429s by Retry-After seconds, in numeric order (a missing header counts under "none")."""

    def key(value: str) -> tuple[int, float]:
        try:
            return (0, float(value))
        except ValueError:
            return (1, 0.0)

    return {value: counts[value] for value in sorted(counts, key=key)}


def summarise_run(
    tally: Tally,
    started: float,
    duration_s: float,
    capacity_rps: float,
    factor: float,
    deadline_s: float,
    rss: dict[str, int],
) -> dict[str, Any]:
    """One overload run's figures. ``started``: perf_counter() when its first request was due."""
    goodput = throughput_between(
        tally.admitted_finished, started + RSS_START_FRACTION * duration_s, started + duration_s
    )
    p50, p99 = percentile(tally.admitted_latencies, 0.50), percentile(tally.admitted_latencies, 0.99)
    growth = (rss["end"] - rss["start"]) / rss["start"]
    classes = status_classes(tally.statuses)
    return {
        "overload": factor,
        "rate_rps": capacity_rps * factor,
        "sent_rps": (sum(tally.statuses.values()) - classes["client_skipped"]) / duration_s,  # what was sent
        "duration_s": duration_s,
        "statuses": dict(sorted(tally.statuses.items())),
        "by_class": classes,
        "goodput_rps": goodput,
        "goodput_vs_capacity": goodput / capacity_rps if goodput is not None else None,
        "answered_200_per_s_sent": classes["200"] / duration_s,  # every 200, drain after the window included
        "admitted_p50_s": p50,
        "admitted_p99_s": p99,
        "deadline_s": deadline_s,
        "admitted_on_new_connections": {
            "count": len(tally.admitted_on_new_connections),
            "p99_s": percentile(tally.admitted_on_new_connections, 0.99),
        },
        "retry_after_s": retry_after_distribution(tally.retry_after),
        "reopened_after_server_close": tally.reopened_after_server_close,
        "connection_errors": {
            "kinds": dict(tally.errors.most_common()),
            "idle_s_before_reuse": {
                "count": len(tally.error_idle_s),
                "min": min(tally.error_idle_s, default=None),
                "p50": percentile(tally.error_idle_s, 0.5),
            },
        },
        "rss_bytes": rss,
        "rss_growth": growth,
        "targets": {
            "goodput_at_least_0.9x_capacity": goodput is not None and goodput >= TARGET_GOODPUT_RATIO * capacity_rps,
            "admitted_p99_at_most_half_the_deadline": p99 is not None and p99 <= TARGET_P99_OF_DEADLINE * deadline_s,
            "no_5xx": classes["5xx"] == 0,
            "no_connection_errors_or_timeouts": classes["connection_error"] + classes["client_timeout"] == 0,
            "rss_growth_under_5pct": growth < TARGET_RSS_GROWTH,
        },
    }


def merge(previous: dict[str, Any] | None, current: dict[str, Any]) -> dict[str, Any]:
    """``current``'s loads replace the same loads of ``previous``; its other loads stay (run loads one at a time)."""
    loads = dict((previous or {}).get("loads", {}))
    loads.update(current["loads"])
    return {**current, "loads": loads}


def all_targets_met(results: dict[str, Any]) -> bool:
    return all(all(run["targets"].values()) for load in results["loads"].values() for run in load["runs"])


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _mib(value: int) -> str:
    return f"{value / 2**20:.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def run_label(run: dict[str, Any]) -> str:
    if "storm_concurrency" in run:
        return f"c={run['storm_concurrency']}, Retry-After ignored"
    return f"{run['overload']:g}x"


def _due(run: dict[str, Any]) -> str:
    return "closed loop" if "storm_concurrency" in run else f"{run['rate_rps']:.2f}"


def load_markdown(name: str, entry: dict[str, Any]) -> list[str]:
    capacity, load = entry["capacity"], entry["load"]
    bodies = load["bodies"]
    lines = [
        f"## {name}",
        "",
        f"Command: `{entry['command']}`",
        "",
        f"`{load['path']}`, {load['what']}; model `{load['model']}` (max length {load['max_length']}); "
        f"{bodies['distinct_bodies']} distinct bodies of {bodies['body_bytes']['min']}-{bodies['body_bytes']['max']} "
        f"bytes, {bodies['text_tokens_per_request']['min']}-{bodies['text_tokens_per_request']['max']} tokens of "
        f"text per request. Server args `{entry['server_args'] or '(defaults)'}`, deadline {entry['deadline_s']:g} s.",
        "",
        f"Capacity at c={capacity['concurrency']}: **{capacity['answers_per_s']:.2f} answers/s** "
        f"({capacity['source']}; answers {capacity['statuses'] or '-'}).",
        "",
        "| overload | due/s | sent/s | goodput/s | vs capacity | p50 s | p99 s | 200 | 429 | 413 | 5xx | conn. err. + "
        "timeouts | skipped | RSS start -> end MiB | load avg start -> end |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for run in entry["runs"]:
        c, rss = run["by_class"], run["rss_bytes"]
        lines.append(
            f"| {run_label(run)} | {_due(run)} | {run['sent_rps']:.2f} | {_s(run['goodput_rps'])} | "
            f"{_ratio(run['goodput_vs_capacity'])} | {_s(run['admitted_p50_s'])} | {_s(run['admitted_p99_s'])} | "
            f"{c['200']} | {c['429']} | {c['413']} | {c['5xx']} | {c['connection_error'] + c['client_timeout']} | "
            f"{c['client_skipped']} | {_mib(rss['start'])} -> {_mib(rss['end'])} ({100 * run['rss_growth']:+.1f} %) | "
            f"{run['load_avg']['start'][0]} -> {run['load_avg']['end'][0]} |"
        )
    lines.append("")
    for run in entry["runs"]:
        missed = [target for target, met in run["targets"].items() if not met]
        lines.append(
            f"- {run_label(run)} for {run['duration_s']:.0f} s: Retry-After of the 429s (s: count) "
            f"{run['retry_after_s'] or '-'}; other statuses {run['statuses']}; connection errors "
            f"{run['connection_errors']['kinds'] or 'none'}; refused or dropped by stage {run.get('shed', '-')}; "
            f"targets missed: {', '.join(missed) or 'none'}."
        )
    return [*lines, ""]


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Overload: goodput with short and long inputs",
        "",
        "Each load: capacity measured closed-loop at c=32 (200 answers/s between completions, after a warm-up), then "
        "requests due open-loop at each multiple of it (sent: those due that found an idle connection; the rest are "
        "counted as skipped). Goodput: 200 answers/s from 10 % of the run to its end, "
        "between completions. p50/p99: latency of the 200s. Targets: goodput >= 0.9x capacity, p99 <= half the "
        "deadline, no 5xx, no connection error or client timeout, RSS growth < 5 % (10 % of the run to its end).",
        "",
    ]
    for name, entry in results["loads"].items():
        lines += load_markdown(name, entry)
    lines += ["| load | overload | " + " | ".join(TARGET_NAMES) + " |",
              "| --- | --- |" + " --- |" * len(TARGET_NAMES)]  # fmt: skip
    for name, entry in results["loads"].items():
        for run in entry["runs"]:
            cells = " | ".join("yes" if run["targets"].get(target) else "no" for target in TARGET_NAMES)
            lines.append(f"| {name} | {run['overload']:g}x | {cells} |")
    return "\n".join([*lines, ""])


TARGET_NAMES = (
    "goodput_at_least_0.9x_capacity",
    "admitted_p99_at_most_half_the_deadline",
    "no_5xx",
    "no_connection_errors_or_timeouts",
    "rss_growth_under_5pct",
)
