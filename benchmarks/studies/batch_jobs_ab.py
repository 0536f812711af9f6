"""``python -m benchmarks.studies.batch_jobs_ab``: an embeddings batch job's speed on two source trees, interleaved.

Each round starts the server of every tree in turn (order alternating), with ``--data-dir`` on a fresh folder, and
runs the same Batch API jobs through HTTP on an otherwise idle server: ``--lines`` lines of one SST-2 dev sentence
each, and ``--lines // 12`` lines of 16 sentences each, all to ``/v1/embeddings``; lines/s from ``POST /v1/batches``
to ``completed``. Asked once: does an output entry that holds the route's answer as written
(``service.batch.lines.EncodedJson``) instead of reading it back and writing it again with ``json`` speed up a job?

    git worktree add /tmp/ab-base 856b65e
    python -m benchmarks.studies.batch_jobs_ab --bundle benchmarks/scratch/minilm-embeddings \\
        --tree base=/tmp/ab-base --tree new=. --out benchmarks/results/batch_jobs_ab-encoded-json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import servers
from benchmarks.ab import revision
from benchmarks.batch_capacity import BatchClient
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import load_inputs
from benchmarks.report import load_average, shown_path, write_report

WORK = SCRATCH_DIR / "batch-jobs-ab"
MODEL, ROUTE = "embeddings", "/v1/embeddings"


def batch_file(path: Path, texts: list[str], lines: int, per_line: int) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for number in range(lines):
            chosen = [texts[(number * per_line + k) % len(texts)] for k in range(per_line)]
            body = {"model": MODEL, "input": chosen if per_line > 1 else chosen[0]}
            out.write(json.dumps({"custom_id": f"row-{number}", "method": "POST", "url": ROUTE, "body": body}) + "\n")
    return path


def run_job(client: BatchClient, path: Path) -> float:
    """Lines/s of one job of ``path``, from its creation to ``completed``."""
    file_id = client.upload(path)
    started = time.monotonic()
    answer = client.http.post("/v1/batches", json={"input_file_id": file_id, "endpoint": ROUTE,
                                                   "completion_window": "24h"})  # fmt: skip
    answer.raise_for_status()
    batch = client.wait(answer.json()["id"], ("completed",))
    return float(batch["request_counts"]["completed"]) / (time.monotonic() - started)


def markdown(report: dict[str, Any]) -> str:
    labels = list(report["trees"])
    lines = [
        "# An embeddings batch job on two trees (benchmarks.studies.batch_jobs_ab)",
        "",
        f"Bundle `{report['bundle']}`; {report['rounds']} interleaved rounds on an idle server; load average at start "
        f"{report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        "",
        *(f"- {label}: {tree}" for label, tree in report["trees"].items()),
        "",
        f"| job | {labels[0]} lines/s median [min-max] | {labels[1]} lines/s median [min-max] "
        f"| {labels[1]}/{labels[0]} | beyond spread |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for job, by_label in report["jobs"].items():
        first, second = by_label[labels[0]], by_label[labels[1]]
        ratio = statistics.median(second) / statistics.median(first)
        beyond = min(second) > max(first) or max(second) < min(first)
        lines.append(
            f"| {job} | {statistics.median(first):.1f} [{min(first):.1f}-{max(first):.1f}] "
            f"| {statistics.median(second):.1f} [{min(second):.1f}-{max(second):.1f}] | {ratio:.3f} "
            f"| {'yes' if beyond else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.batch_jobs_ab", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bundle", type=Path, required=True, help="a feature-extraction bundle")
    parser.add_argument("--tree", action="append", required=True, help="LABEL=PATH of a source tree (two)")
    parser.add_argument("--lines", type=int, default=3000, help="lines of the one-sentence job")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    load_at_start = os.getloadavg()
    trees = {label: Path(path).resolve() for label, _, path in (item.partition("=") for item in args.tree)}
    if len(trees) != 2:
        parser.error("give two --tree LABEL=PATH")
    bundle = args.bundle.resolve()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    texts = load_inputs("sst2")
    sixteen = args.lines // 12
    files = {
        f"{args.lines} lines x 1 sentence": batch_file(WORK / "one.jsonl", texts, args.lines, 1),
        f"{sixteen} lines x 16 sentences": batch_file(WORK / "sixteen.jsonl", texts, sixteen, 16),
    }
    rates: dict[str, dict[str, list[float]]] = {job: {label: [] for label in trees} for job in files}
    for number in range(args.rounds):
        order = list(trees) if number % 2 == 0 else list(trees)[::-1]
        for label in order:
            port = servers.free_port()
            data = WORK / f"data-{label}-{number}"
            command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level",
                       "warning", "--model", f"{MODEL}={bundle}", "--data-dir", str(data)]  # fmt: skip
            name = f"batch-jobs-{label}"
            with servers.running(name, command, port, "/health/ready", WORK / "logs", cwd=trees[label]) as server:
                client = BatchClient(server.base_url)
                for job, path in files.items():
                    rates[job][label].append(round(run_job(client, path), 2))
                    logging.info("round %d %s %s: %.1f lines/s", number, label, job, rates[job][label][-1])
    report = {
        "bundle": shown_path(bundle), "rounds": args.rounds,
        "trees": {label: revision(tree) for label, tree in trees.items()}, "jobs": rates,
        "load_avg": load_average(load_at_start),
    }  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
