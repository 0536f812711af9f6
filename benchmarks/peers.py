"""bertserve against LitServe + ONNX Runtime (``litserve_app.py``), side by side, interleaved.

Each round starts every system in turn (order alternating by round), checks that it answers a few SST-2 dev
sentences with the labels bertserve gives, then at each concurrency runs wrk for --warmup and --duration seconds,
recording sequences/s, p50/p99 latency, errors and the server's CPU ms per request (every process of its session:
LitServe's HTTP servers, inference workers and queue manager included); then stops it. Both take the same bodies
(one SST-2 dev sentence each): bertserve on ``/v1/text-classification``, LitServe on ``/predict``. The report
gives medians over rounds, their min-max, and bertserve / the best LitServe variant per concurrency.

    BERTSERVE_EVAL_DATA=/work/shared/data python -m benchmarks.peers --model sst2=BUNDLE \\
        --concurrency 1,8,32,128 --rounds 3 --duration 10 --out benchmarks/results/litserve
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import logging
import os
import signal
import statistics
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import loadgen, servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.litserve_setup import LITSERVE_REQUIREMENT, ensure_litserve_venv, venv_python
from benchmarks.loads import bertserve_loads
from benchmarks.report import load_average, load_parser, machine_facts, page, table, tree_commit, write_report

log = logging.getLogger("benchmarks.peers")
LOG_DIR = SCRATCH_DIR / "peers-logs"
LITSERVE_APP = Path(__file__).with_name("litserve_app.py")
BERTSERVE = "bertserve"
PROBES = 5  # sentences whose top label every system must share with bertserve


@dataclass(frozen=True)
class System:
    name: str
    description: str
    path: str  # the classification route
    ready_path: str
    litserve_args: tuple[str, ...] = ()  # empty: bertserve

    def command(self, name: str, bundle: Path, port: int) -> list[str]:
        if not self.litserve_args:
            return [sys.executable, "-m", "service", "--model", f"{name}={bundle}", "--port", str(port),
                    "--host", "127.0.0.1", "--log-level", "warning"]  # fmt: skip
        return [str(venv_python()), str(LITSERVE_APP), str(bundle), "--port", str(port), "--log-level", "warning",
                *self.litserve_args]  # fmt: skip


def litserve(workers: int, threads: int, batch: int = 32, timeout_ms: float = 5.0) -> System:
    return System(
        f"litserve-{workers}x{threads}",
        f"LitServe + ORT, {workers} worker(s) x {threads} thread(s), batch {batch}, {timeout_ms:g} ms",
        "/predict", "/health",
        ("--workers", str(workers), "--threads", str(threads), "--max-batch-size", str(batch),
         "--batch-timeout", str(timeout_ms / 1000)),
    )  # fmt: skip


BERTSERVE_SYSTEM = System(BERTSERVE, "bertserve, defaults", "/v1/text-classification", "/health/ready")
SYSTEMS = {system.name: system for system in (BERTSERVE_SYSTEM, litserve(2, 1), litserve(1, 2))}


def top_label(answer: Any) -> str:
    """The highest-scoring label of the first input of either answer shape."""
    if isinstance(answer, dict):
        return top_label(answer["results"])
    if isinstance(answer[0], dict):
        return str(max(answer, key=lambda item: item["score"])["label"])
    return top_label(answer[0])


def probe_labels(url: str, bodies: list[dict[str, Any]]) -> list[str]:
    labels = []
    for body in bodies:
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            labels.append(top_label(json.load(response)))
    return labels


def session_members(session_id: int) -> list[int]:
    """The live (not zombie) processes of session ``session_id``, from /proc/PID/stat (field 3: state, 6: session)."""
    members = []
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_path.read_text()
        except OSError:
            continue
        state, _, _, session = fields[fields.rindex(")") + 2 :].split()[:4]
        if int(session) == session_id and state != "Z":
            members.append(int(stat_path.parent.name))
    return members


def end_session(session_id: int, grace_s: float = 3.0) -> None:
    """SIGKILL what is left of a stopped server's session after ``grace_s``: LitServe's HTTP processes outlive its
    main one on SIGTERM, spinning part of a core for uvicorn's 30 s graceful timeout, into the next system's window."""
    deadline = time.monotonic() + grace_s
    while (left := session_members(session_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if left:
        log.info("killed %d process(es) left of session %d after SIGTERM", len(left), session_id)


def measure(args: argparse.Namespace, system: System, bodies: list[dict[str, Any]], bodies_file: Path,
            round_index: int) -> tuple[list[dict[str, Any]], list[str]]:  # fmt: skip
    port = servers.free_port()
    command = system.command(args.name, args.bundle, port)
    points: list[dict[str, Any]] = []
    session = 0
    try:
        with servers.running(system.name, command, port, system.ready_path, LOG_DIR) as server:
            session = server.pid  # it leads its own session
            url = server.base_url + system.path
            labels = probe_labels(url, bodies[:PROBES])
            for concurrency in args.concurrency:
                loadgen.run_wrk(url, bodies_file, concurrency, args.warmup)
                cpu_before, wall_before = server.cpu_seconds(), time.monotonic()
                result = loadgen.run_wrk(url, bodies_file, concurrency, args.duration)
                cpu, wall = server.cpu_seconds() - cpu_before, time.monotonic() - wall_before
                point = {
                    "round": round_index, "system": system.name, "concurrency": concurrency,
                    "sequences_per_s": round(result.sequences_per_s, 2), "p50_ms": round(result.p50_ms, 2),
                    "p99_ms": round(result.p99_ms, 2), "errors": result.errors, "requests": result.requests,
                    "cpu_ms_per_request": round(1000 * cpu / max(1, result.requests), 3),
                    "cores_busy": round(cpu / wall, 2),
                }  # fmt: skip
                points.append(point)
                log.info("%s c=%d: %.1f seq/s, p50 %.1f / p99 %.1f ms, %.2f CPU ms/request, %d errors", system.name,
                         concurrency, result.sequences_per_s, result.p50_ms, result.p99_ms,
                         point["cpu_ms_per_request"], result.errors)  # fmt: skip
    finally:
        if session:
            end_session(session)  # after running() has stopped it
    return points, labels


def summarize(points: list[dict[str, Any]], names: list[str], concurrency: list[int]) -> list[dict[str, Any]]:
    """Per system and concurrency: medians over rounds, the seq/s range and the errors summed."""
    rows = []
    for name in names:
        for level in concurrency:
            mine = [p for p in points if p["system"] == name and p["concurrency"] == level]
            speeds = [p["sequences_per_s"] for p in mine]
            rows.append({
                "system": name, "concurrency": level, "sequences_per_s": round(statistics.median(speeds), 2),
                "min": min(speeds), "max": max(speeds), "errors": sum(p["errors"] for p in mine),
                **{key: round(statistics.median(p[key] for p in mine), 2)
                   for key in ("p50_ms", "p99_ms", "cpu_ms_per_request", "cores_busy")},
            })  # fmt: skip
    return rows


def ratios(summary: list[dict[str, Any]], concurrency: list[int], rounds: int) -> list[dict[str, Any]]:
    """bertserve's median over the best LitServe variant's (by median), and whether it wins beyond the spread
    (from two rounds on: one round has no spread)."""
    entries = []
    for level in concurrency:
        rows = {row["system"]: row for row in summary if row["concurrency"] == level}
        peers = [row for name, row in rows.items() if name != BERTSERVE]
        if BERTSERVE not in rows or not peers:
            continue
        ours, best = rows[BERTSERVE], max(peers, key=lambda row: row["sequences_per_s"])
        entries.append({
            "concurrency": level, "best_litserve": best["system"],
            "ratio": round(ours["sequences_per_s"] / best["sequences_per_s"], 3) if best["sequences_per_s"] else None,
            "cpu_ratio": round(ours["cpu_ms_per_request"] / best["cpu_ms_per_request"], 3)
            if best["cpu_ms_per_request"] else None,
            "verdict": "one round, no spread" if rounds < 2 else "win" if ours["min"] > best["max"]
            else "loss" if ours["max"] < best["min"] else "within spread",
        })  # fmt: skip
    return entries


def markdown(report: dict[str, Any]) -> str:
    systems = table(("system", "what it is"), ((s["name"], s["description"]) for s in report["systems"]))
    figures = table(
        ("system", "concurrency:", "seq/s median:", "min-max:", "p50 ms:", "p99 ms:", "CPU ms / request:",
         "cores busy:", "errors:"),
        ((row["system"], row["concurrency"], f"{row['sequences_per_s']:.1f}", f"{row['min']:.1f}-{row['max']:.1f}",
          f"{row['p50_ms']:.1f}", f"{row['p99_ms']:.1f}", f"{row['cpu_ms_per_request']:.2f}",
          f"{row['cores_busy']:.2f}", row["errors"]) for row in report["summary"]),
    )  # fmt: skip
    verdicts = table(
        ("concurrency:", "best LitServe variant", "bertserve / LitServe (seq/s):", "CPU ms / request ratio:",
         "verdict"),
        ((e["concurrency"], e["best_litserve"], e["ratio"], e["cpu_ratio"], e["verdict"]) for e in report["ratios"]),
    )  # fmt: skip
    agree = ", ".join(f"{name} {count}/{report['probes']}" for name, count in report["labels_agree"].items())
    intro = (
        f"Tree {report['tree']}, {report['versions']}; model `{report['model']}`; {report['rounds']} interleaved "
        f"round(s) (order alternating), each point {report['duration_s']:g} s of wrk (one thread, one request in "
        f"flight per connection, SST-2 dev sentences in rotation) after {report['warmup_s']:g} s of warm-up. CPU ms / "
        "request: the server's CPU time (every process of its session) over the window, per request answered; cores "
        f"busy: that CPU time over the window's wall time (wrk shares the cores). Top labels agreeing with bertserve's "
        f"on {report['probes']} sentences: {agree}. Load average at start {report['load_avg']['start']}, at end "
        f"{report['load_avg']['end']}."
    )
    return page("bertserve vs LitServe + ONNX Runtime", intro, systems, figures, verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = load_parser(__doc__, rounds=3, models="one SST-2 text-classification bundle")
    parser.add_argument("--concurrency", type=lambda text: [int(c) for c in text.split(",")], default=[1, 8, 32, 128])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"a subset of {', '.join(SYSTEMS)}")
    args = parser.parse_args(argv)
    if len(args.model) != 1:
        parser.error("give one --model NAME=BUNDLE")
    args.name, _, path = args.model[0].partition("=")
    args.bundle = Path(path).resolve()
    chosen = [SYSTEMS[name] for name in args.systems.split(",") if name in SYSTEMS]
    if not chosen:
        parser.error(f"--systems: none of {', '.join(SYSTEMS)}")
    at_start = os.getloadavg()
    if any(system.litserve_args for system in chosen):
        ensure_litserve_venv()
    bodies = bertserve_loads("sst2", args.name)[0].bodies
    bodies_file = loadgen.write_bodies(bodies, LOG_DIR / "bodies-sst2.jsonl")
    points: list[dict[str, Any]] = []
    labels: dict[str, list[str]] = {}
    for round_index in range(args.rounds):
        for system in chosen if round_index % 2 == 0 else chosen[::-1]:
            measured, labels[system.name] = measure(args, system, bodies, bodies_file, round_index)
            points += measured
    reference = labels.get(BERTSERVE, [])
    agree = {name: sum(a == b for a, b in zip(got, reference, strict=False)) for name, got in labels.items()
             if name != BERTSERVE and reference}  # fmt: skip
    for name, count in agree.items():
        if count < len(reference):
            log.warning("%s: top labels %s, bertserve's %s", name, labels[name], reference)
    names = [system.name for system in chosen]
    summary = summarize(points, names, args.concurrency)
    machine = machine_facts()  # its "git" says whether bertserve ran from uncommitted source
    machine.pop("load_average_at_start", None)  # read now, at the end: load_avg has both
    report = {
        "tree": machine.get("git") or tree_commit(), "machine": machine, "model": args.model[0],
        "rounds": args.rounds, "duration_s": args.duration, "warmup_s": args.warmup, "concurrency": args.concurrency,
        "versions": f"{LITSERVE_REQUIREMENT}, onnxruntime {importlib.metadata.version('onnxruntime')}",
        "systems": [{"name": s.name, "description": s.description, "path": s.path} for s in chosen],
        "probes": PROBES, "labels": labels, "labels_agree": agree, "points": points, "summary": summary,
        "ratios": ratios(summary, args.concurrency, args.rounds), "load_avg": load_average(at_start),
    }  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
