"""Spare capacity: online latency with a batch job running, and a batch's throughput on an idle server.

One SST-2 bundle, one server (``python -m service --data-dir SCRATCH``), the Batch API driven over HTTP:

- online p99 at c=8 (wrk, one SST-2 dev sentence per request, ``/v1/text-classification``) with no batch and with a
  large batch job in progress, in interleaved rounds; the batch is cancelled after each loaded window and the lines
  it answered during the window give its rate under the online load. Target: p99 with a batch <= 1.2x without;
- batch throughput on the otherwise idle server: a file of ``--lines`` SST-2 dev sentences (the dev set repeated),
  lines/s from ``POST /v1/batches`` to ``completed``, against the raw ORT loop over the same sentences
  (``raw_ort.measure_global``: all rows length-sorted at once, the best batch size; and ``raw_ort.measure``'s
  chunk-sorted loop). Target: >= 0.9x raw.

    BERTSERVE_EVAL_DATA=/work/shared/data python -m benchmarks.batch_capacity \\
        --bundle benchmarks/scratch/ab-sst2-fp32 --out benchmarks/results/batch_capacity
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import loadgen, raw_ort, servers
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.loads import bertserve_loads, load_inputs
from benchmarks.report import load_average, write_report

log = logging.getLogger("benchmarks.batch_capacity")
SCRATCH = SCRATCH_DIR / "batch-capacity"
ROUTE = "/v1/text-classification"
MODEL = "sst2"
P99_TARGET, THROUGHPUT_TARGET = 1.2, 0.9
FINISHED = ("completed", "failed", "expired", "cancelled")


def batch_file(texts: list[str], lines: int, path: Path) -> Path:
    """``lines`` requests, one SST-2 sentence each, cycling through ``texts``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for number in range(lines):
            body = {"model": MODEL, "inputs": texts[number % len(texts)], "truncation": True}
            out.write(json.dumps({"custom_id": f"row-{number}", "method": "POST", "url": ROUTE, "body": body}) + "\n")
    return path


class BatchClient:
    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=120)

    def upload(self, path: Path) -> str:
        with path.open("rb") as content:
            answer = self.http.post("/v1/files", data={"purpose": "batch"}, files={"file": (path.name, content)})
        answer.raise_for_status()
        return str(answer.json()["id"])

    def create(self, file_id: str) -> str:
        body = {"input_file_id": file_id, "endpoint": ROUTE, "completion_window": "24h"}
        answer = self.http.post("/v1/batches", json=body)
        answer.raise_for_status()
        return str(answer.json()["id"])

    def get(self, batch_id: str) -> dict[str, Any]:
        answer = self.http.get(f"/v1/batches/{batch_id}")
        answer.raise_for_status()
        return dict(answer.json())

    def cancel(self, batch_id: str) -> dict[str, Any]:
        self.http.post(f"/v1/batches/{batch_id}/cancel").raise_for_status()
        return self.wait(batch_id, FINISHED)

    def wait(
        self, batch_id: str, statuses: tuple[str, ...], min_done: int = 0, timeout_s: float = 900
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = self.get(batch_id)
            done = batch["request_counts"]["completed"] + batch["request_counts"]["failed"]
            if batch["status"] in statuses and done >= min_done:
                return batch
            if batch["status"] in FINISHED and batch["status"] not in statuses:
                raise RuntimeError(f"batch {batch_id} ended {batch['status']}: {batch.get('errors')}")
            time.sleep(0.1)
        raise RuntimeError(f"batch {batch_id} not {statuses} after {timeout_s:.0f} s")


def idle_throughput(client: BatchClient, file_id: str, lines: int) -> dict[str, Any]:
    started = time.monotonic()
    batch_id = client.create(file_id)
    batch = client.wait(batch_id, ("completed",))
    seconds = time.monotonic() - started
    counts = batch["request_counts"]
    log.info("idle batch of %d lines: %.1f s, %.1f lines/s", lines, seconds, lines / seconds)
    return {"lines": lines, "seconds": round(seconds, 2), "lines_per_s": round(lines / seconds, 2),
            "completed": counts["completed"], "failed": counts["failed"]}  # fmt: skip


def online_window(args: argparse.Namespace, url: str, bodies: Path) -> dict[str, Any]:
    result = loadgen.run_wrk(url, bodies, args.concurrency, args.duration)
    return {"requests": result.requests, "errors": result.errors, "sequences_per_s": round(result.sequences_per_s, 2),
            "p50_ms": round(result.p50_ms, 2), "p99_ms": round(result.p99_ms, 2)}  # fmt: skip


def loaded_window(
    args: argparse.Namespace, client: BatchClient, file_id: str, url: str, bodies: Path
) -> dict[str, Any]:
    """The online window while a large batch is in progress; the batch's own rate over the window."""
    batch_id = client.create(file_id)
    before = client.wait(batch_id, ("in_progress",), min_done=1)
    started = time.monotonic()
    point = online_window(args, url, bodies)
    after = client.get(batch_id)
    seconds = time.monotonic() - started
    done = [b["request_counts"]["completed"] + b["request_counts"]["failed"] for b in (before, after)]
    point["batch_status_at_end"] = after["status"]
    point["batch_lines_per_s"] = round((done[1] - done[0]) / seconds, 2)
    client.cancel(batch_id)
    return point


def measure_online(args: argparse.Namespace, client: BatchClient, big_id: str, base_url: str) -> list[dict[str, Any]]:
    bodies = loadgen.write_bodies(bertserve_loads("sst2", MODEL)[0].bodies, SCRATCH / "bodies-sst2.jsonl")
    url = base_url + ROUTE
    loadgen.run_wrk(url, bodies, args.concurrency, args.warmup)
    rounds = []
    for number in range(args.rounds):
        alone = online_window(args, url, bodies)
        with_batch = loaded_window(args, client, big_id, url, bodies)
        log.info("round %d: p99 %.1f ms alone, %.1f ms with a batch (%.1f lines/s)", number, alone["p99_ms"],
                 with_batch["p99_ms"], with_batch["batch_lines_per_s"])  # fmt: skip
        rounds.append({"round": number, "alone": alone, "with_batch": with_batch})
    return rounds


def measure_raw(bundle: Path, texts: list[str], duration_s: float) -> dict[str, Any]:
    whole = raw_ort.measure_global(bundle, "text-classification", texts)
    chunked = raw_ort.measure(bundle, "text-classification", texts, duration_s)
    return {
        "global_sorted": {"sequences_per_s": round(whole.sequences_per_s, 2), "batch_size": whole.batch_size},
        "chunk_sorted": {"sequences_per_s": round(chunked.sequences_per_s, 2), "batch_size": chunked.batch_size},
    }


def summary(report: dict[str, Any]) -> dict[str, Any]:
    rounds = report["online"]
    alone = statistics.mean(r["alone"]["p99_ms"] for r in rounds)
    loaded = statistics.mean(r["with_batch"]["p99_ms"] for r in rounds)
    batch = statistics.mean(run["lines_per_s"] for run in report["batch_idle"])
    raw = report["raw"]["global_sorted"]["sequences_per_s"]
    return {
        "p99_alone_ms": round(alone, 2), "p99_with_batch_ms": round(loaded, 2),
        "p99_ratio": round(loaded / alone, 3), "p99_target": P99_TARGET, "p99_met": loaded / alone <= P99_TARGET,
        "batch_lines_per_s": round(batch, 2), "raw_sequences_per_s": raw,
        "throughput_ratio": round(batch / raw, 3), "throughput_target": THROUGHPUT_TARGET,
        "throughput_met": batch / raw >= THROUGHPUT_TARGET,
        "throughput_ratio_chunk_sorted": round(batch / report["raw"]["chunk_sorted"]["sequences_per_s"], 3),
    }  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    raw = report["raw"]
    lines = [
        "# Batch jobs on spare capacity (benchmarks.batch_capacity)", "",
        f"Tree {report['tree']}; server args `{report.get('server_args') or '(defaults)'}`; bundle "
        f"`{report['bundle']}`; {os.cpu_count()} cores; load average at start {report['load_avg']['start']}, at end "
        f"{report['load_avg']['end']}.", "",
        "| figure | measured | target | met |", "| --- | ---: | ---: | --- |",
        f"| online p99 at c={report['concurrency']}, with a batch / without | {s['p99_with_batch_ms']:.1f} / "
        f"{s['p99_alone_ms']:.1f} ms = {s['p99_ratio']:.2f}x | <= {P99_TARGET}x | {'yes' if s['p99_met'] else 'no'} |",
        f"| batch lines/s on an idle server / raw ORT (all rows length-sorted) | {s['batch_lines_per_s']:.1f} / "
        f"{s['raw_sequences_per_s']:.1f} = {s['throughput_ratio']:.2f}x | >= {THROUGHPUT_TARGET}x "
        f"| {'yes' if s['throughput_met'] else 'no'} |", "",
        f"Raw ORT over the same {report['batch_lines']} sentences: {raw['global_sorted']['sequences_per_s']:.1f} seq/s "
        f"length-sorted across the whole set (batch {raw['global_sorted']['batch_size']}), "
        f"{raw['chunk_sorted']['sequences_per_s']:.1f} seq/s in 512-sentence sorted chunks (batch "
        f"{raw['chunk_sorted']['batch_size']}): the batch runs at {s['throughput_ratio_chunk_sorted']:.2f}x the "
        "chunked loop.", "",
        *([report["note"], ""] if "note" in report else []),
        *(
            [f"The raw loop was measured again after the run (load average {report['raw_load_avg']['start']} at its "
             f"start, {report['raw_load_avg']['end']} at its end): other processes shared the cores during the "
             f"first measurement, which gave {report['raw_contended']['global_sorted']['sequences_per_s']:.1f} "
             f"seq/s (whole set sorted) and {report['raw_contended']['chunk_sorted']['sequences_per_s']:.1f} "
             "(chunks).", ""]
            if "raw_contended" in report else []
        ),
        "## Online rounds (wrk, one SST-2 sentence per request, interleaved)", "",
        "| round | load | seq/s | p50 ms | p99 ms | errors | batch lines/s during the window |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]  # fmt: skip
    for r in report["online"]:
        for name in ("alone", "with_batch"):
            p = r[name]
            rate = p.get("batch_lines_per_s", "")
            lines.append(f"| {r['round']} | {name.replace('_', ' ')} | {p['sequences_per_s']:.1f} | {p['p50_ms']:.1f} "
                         f"| {p['p99_ms']:.1f} | {p['errors']} | {rate} |")  # fmt: skip
    lines += ["", "## Idle batch runs", "", "| run | lines | seconds | lines/s |", "| ---: | ---: | ---: | ---: |"]
    for number, run in enumerate(report["batch_idle"]):
        lines.append(f"| {number} | {run['lines']} | {run['seconds']:.1f} | {run['lines_per_s']:.1f} |")
    return "\n".join(lines) + "\n"


def remeasure_raw(args: argparse.Namespace) -> int:
    """The raw loop again (e.g. after other processes ran during the first), the report's summary from it."""
    report = json.loads(args.out.with_suffix(".json").read_text())
    dev = load_inputs("sst2")
    texts = [dev[number % len(dev)] for number in range(report["batch_lines"])]
    load_at_start = os.getloadavg()
    report["raw_contended"] = report["raw"]
    report["raw"] = measure_raw(REPO_ROOT / report["bundle"], texts, report["duration_s"])
    report["raw_load_avg"] = load_average(load_at_start)
    report["summary"] = summary(report)
    write_report(args.out, report, markdown(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.batch_capacity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=SCRATCH_DIR / "ab-sst2-fp32")
    parser.add_argument("--lines", type=int, default=3488, help="lines of the idle throughput batch")
    parser.add_argument("--big-lines", type=int, default=30000, help="lines of the batch that runs beside wrk")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per wrk window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle-runs", type=int, default=2)
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    parser.add_argument("--server-args", default="", help="extra flags for python -m service (--processes 2)")
    parser.add_argument("--tree", type=Path, default=REPO_ROOT, help="the source tree whose service is measured")
    parser.add_argument(
        "--remeasure-raw", action="store_true",
        help="only measure the raw loop again into the report at --out (its first raw figures kept as raw_contended)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.remeasure_raw:
        return remeasure_raw(args)
    load_at_start = os.getloadavg()
    bundle = args.bundle.resolve()
    dev = load_inputs("sst2")
    texts = [dev[number % len(dev)] for number in range(args.lines)]
    raw = measure_raw(bundle, texts, args.duration)
    shutil.rmtree(SCRATCH, ignore_errors=True)
    small, big = (
        batch_file(dev, args.lines, SCRATCH / "idle.jsonl"),
        batch_file(dev, args.big_lines, SCRATCH / "big.jsonl"),
    )
    port = servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
               "--model", f"{MODEL}={bundle}", "--data-dir", str(SCRATCH / "data"),
               *shlex.split(args.server_args)]  # fmt: skip
    tree = args.tree.resolve()
    with servers.running("batch-capacity", command, port, "/health/ready", SCRATCH / "logs", cwd=tree) as server:
        client = BatchClient(server.base_url)
        small_id, big_id = client.upload(small), client.upload(big)
        client.wait(client.create(client.upload(batch_file(dev, 256, SCRATCH / "warm.jsonl"))), ("completed",))
        idle = [idle_throughput(client, small_id, args.lines) for _ in range(args.idle_runs)]
        online = measure_online(args, client, big_id, server.base_url)
    from benchmarks.ab import revision

    report: dict[str, Any] = {
        "tree": revision(tree), "server_args": args.server_args, "bundle": str(bundle.relative_to(REPO_ROOT)),
        "concurrency": args.concurrency,
        "duration_s": args.duration, "batch_lines": args.lines, "big_batch_lines": args.big_lines, "raw": raw,
        "batch_idle": idle, "online": online, "load_avg": load_average(load_at_start),
    }  # fmt: skip
    report["summary"] = summary(report)
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
