"""Cohere embed jobs against the OpenAI Batch API and the raw ORT loop, on one embedding bundle and one idle server.

The same texts (``--rows`` SST-2 dev sentences, the dev set repeated) three ways, interleaved run by run on one
server (``python -m service --data-dir SCRATCH``):

- an embed job: ``POST /v1/embed-jobs`` of an uploaded embed-input dataset, rows/s from create to ``complete``
  (the output dataset written: the job's finalizing is counted);
- an OpenAI batch of ``/v1/embeddings`` lines (one text a line), rows/s from create to ``completed``;
- the raw ORT loop over the same texts (``raw_ort.measure_global``: all rows length-sorted at once, the best batch
  size; and ``raw_ort.measure``'s chunk-sorted loop).

    BERTSERVE_EVAL_DATA=/work/shared/data python -m benchmarks.embed_jobs \\
        --bundle benchmarks/scratch/bundles/embeddings-fp32 --out benchmarks/results/embed_jobs
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

import httpx

from benchmarks import raw_ort, servers
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.loads import load_inputs
from benchmarks.report import load_average, shown_path, write_report

log = logging.getLogger("benchmarks.embed_jobs")
SCRATCH = SCRATCH_DIR / "embed-jobs"
MODEL = "embed"


def wait_for(http: httpx.Client, path: str, field: str, done: str, timeout_s: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = http.get(path)
        answer.raise_for_status()
        state = dict(answer.json())
        if state[field] == done:
            return state
        if state[field] in ("failed", "cancelled", "expired"):
            raise RuntimeError(f"{path} ended {state[field]}")
        time.sleep(0.05)
    raise RuntimeError(f"{path} not {done} after {timeout_s:.0f} s")


def embed_job(http: httpx.Client, dataset_id: str, rows: int) -> dict[str, Any]:
    started = time.monotonic()
    body = {"model": MODEL, "dataset_id": dataset_id, "input_type": "search_document"}
    created = http.post("/v1/embed-jobs", json=body)
    created.raise_for_status()
    job = wait_for(http, f"/v1/embed-jobs/{created.json()['job_id']}", "status", "complete")
    seconds = time.monotonic() - started
    output = http.get(f"/v1/datasets/{job['output_dataset_id']}").json()["dataset"]
    embedded = output["dataset_parts"][0]["num_rows"]
    log.info("embed job of %d rows: %.1f s, %.1f rows/s", rows, seconds, rows / seconds)
    return {"rows": rows, "embedded": embedded, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds, 2)}


def openai_batch(http: httpx.Client, file_id: str, rows: int) -> dict[str, Any]:
    started = time.monotonic()
    body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    created = http.post("/v1/batches", json=body)
    created.raise_for_status()
    batch = wait_for(http, f"/v1/batches/{created.json()['id']}", "status", "completed")
    seconds = time.monotonic() - started
    log.info("batch of %d lines: %.1f s, %.1f lines/s", rows, seconds, rows / seconds)
    return {"rows": rows, "embedded": batch["request_counts"]["completed"], "seconds": round(seconds, 2),
            "rows_per_s": round(rows / seconds, 2)}  # fmt: skip


def upload(http: httpx.Client, texts: list[str]) -> tuple[str, str]:
    """The texts as an embed-input dataset and as a batch input file of ``/v1/embeddings`` lines."""
    rows = "".join(json.dumps({"text": text}) + "\n" for text in texts).encode()
    dataset = http.post("/v1/datasets", params={"name": "bench", "type": "embed-input"},
                        files={"data": ("rows.jsonl", rows)})  # fmt: skip
    dataset.raise_for_status()
    lines = "".join(
        json.dumps({"custom_id": f"row-{n}", "method": "POST", "url": "/v1/embeddings",
                    "body": {"model": MODEL, "input": text}}) + "\n"
        for n, text in enumerate(texts)
    ).encode()  # fmt: skip
    uploaded = http.post("/v1/files", data={"purpose": "batch"}, files={"file": ("lines.jsonl", lines)})
    uploaded.raise_for_status()
    return str(dataset.json()["id"]), str(uploaded.json()["id"])


def markdown(report: dict[str, Any]) -> str:
    s, raw = report["summary"], report["raw"]
    lines = [
        "# Embed jobs against the Batch API and the raw ORT loop",
        "",
        f"Tree `{report['tree']}`, bundle `{report['bundle']}`, {report['rows']} SST-2 dev sentences, "
        f"{len(report['runs'])} interleaved runs on one idle server (2 cores). Load average at start / end: "
        f"{report['load_avg']}.",
        "",
        "| way | rows/s (each run) | mean | vs raw, all rows sorted | vs raw, chunk-sorted |",
        "|---|---|---|---|---|",
    ]
    for way, title in (("embed_job", "Cohere embed job"), ("openai_batch", "OpenAI batch of /v1/embeddings")):
        each = ", ".join(str(run[way]["rows_per_s"]) for run in report["runs"])
        lines.append(f"| {title} | {each} | {s[way]} | {s[way + '_vs_raw']}x | {s[way + '_vs_chunk_sorted']}x |")
    lines += [
        f"| raw ORT, all rows length-sorted (batch {raw['global_sorted']['batch_size']}) | | "
        f"{raw['global_sorted']['sequences_per_s']} | 1x | |",
        f"| raw ORT, 512-text chunks sorted (batch {raw['chunk_sorted']['batch_size']}) | | "
        f"{raw['chunk_sorted']['sequences_per_s']} | | 1x |",
        "",
        "An embed job's time counts its finalizing (the output dataset's Avro part written); each row was embedded "
        "in every run (`embedded` in the JSON).",
        "",
        f"Command: `{report['command']}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embed_jobs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=SCRATCH_DIR / "bundles" / "embeddings-fp32")
    parser.add_argument("--rows", type=int, default=3488)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of the chunk-sorted raw loop")
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    load_at_start = os.getloadavg()
    bundle = args.bundle.resolve()
    dev = load_inputs("sst2")
    texts = [dev[number % len(dev)] for number in range(args.rows)]
    whole = raw_ort.measure_global(bundle, "feature-extraction", texts)
    chunked = raw_ort.measure(bundle, "feature-extraction", texts, args.duration)
    raw = {
        "global_sorted": {"sequences_per_s": round(whole.sequences_per_s, 2), "batch_size": whole.batch_size},
        "chunk_sorted": {"sequences_per_s": round(chunked.sequences_per_s, 2), "batch_size": chunked.batch_size},
    }
    shutil.rmtree(SCRATCH, ignore_errors=True)
    port = servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
               "--model", f"{MODEL}={bundle}", "--data-dir", str(SCRATCH / "data")]  # fmt: skip
    runs = []
    with servers.running("embed-jobs", command, port, "/health/ready", SCRATCH / "logs") as server:
        http = httpx.Client(base_url=server.base_url, timeout=120)
        dataset_id, file_id = upload(http, texts)
        warm_id, _ = upload(http, texts[:256])
        embed_job(http, warm_id, 256)
        for number in range(args.runs):  # interleaved, the order swapped each run
            ways = [("embed_job", embed_job, dataset_id), ("openai_batch", openai_batch, file_id)]
            runs.append(
                {name: way(http, source, args.rows) for name, way, source in ways[:: 1 if number % 2 == 0 else -1]}
            )
    from benchmarks.ab import revision

    report: dict[str, Any] = {
        "tree": revision(REPO_ROOT), "bundle": shown_path(bundle), "rows": args.rows, "raw": raw,
        "runs": runs, "load_avg": load_average(load_at_start),
        "command": "python -m benchmarks.embed_jobs " + " ".join(argv if argv is not None else sys.argv[1:]),
    }  # fmt: skip
    summary: dict[str, Any] = {}
    for way in ("embed_job", "openai_batch"):
        mean = statistics.mean(run[way]["rows_per_s"] for run in runs)
        summary[way] = round(mean, 2)
        summary[way + "_vs_raw"] = round(mean / raw["global_sorted"]["sequences_per_s"], 3)
        summary[way + "_vs_chunk_sorted"] = round(mean / raw["chunk_sorted"]["sequences_per_s"], 3)
    report["summary"] = summary
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
