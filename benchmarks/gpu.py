"""Serving on a GPU (issue 44): fp16 bundles on ONNX Runtime's CUDA provider, checked and timed on one card.

Runs only on a machine with an NVIDIA GPU, onnxruntime-gpu and torch (never in tests or CI). Two stages, so the
exports can run while the payload arrives (``benchmarks/gpu_payload.sh`` carries and installs what the GPU machine
lacks):

- ``export``: the MiniLM SST-2 checkpoint (``--sst2-checkpoint``; fp16-stored weights are widened to fp32 first) to a
  CPU fp32 bundle and a CUDA fp16 bundle, the same encoder as a sentence-embedding model (fp32 and fp16), and a
  random-weight BERT-base (12 x 768, 512 positions) to an fp16 bundle; the five exports run at once.
- ``measure``: (1) the CPU fp32 bundles on the CPU provider give the reference answers; (2) a raw ONNX Runtime CUDA
  loop over each fp16 bundle (tokenize, sort every input by length, pad, run: the best batch size of a sweep, and
  the median batch-1 call), then the service's own engine in this process on the card, no HTTP (c=1 and c=32: rows
  and model time per batch, ``benchmarks.studies.core_floor``), which tells a batch slowed in the service's session
  from one slowed behind the server's HTTP, and c=32 with batches padded to the service's shape buckets (its GPU
  default) against batches run as they form; (3) ``python -m service --device cuda`` serving the three fp16 bundles:
  top-1 agreement with the CPU on SST-2 dev and embedding cosines, then closed-loop HTTP load at c=1 / 32 / 128 (one
  input a request) and c=32 with 16 inputs a request; (4) the transformers pipeline on torch fp16 on the same card
  (``benchmarks.gpu_torch``, its own process); (4b) ``benchmarks.gpu_processes``: the server with ``--processes`` 2
  and 4 on the one card, loaded by as many client processes, summed; (5) ``benchmarks.gpu_shapes``: what a batch of a
  shape not run before costs on the service's session, with CUDA's kernels loaded lazily and eagerly, exact and
  bucketed. Workloads: SST-2 dev sentences (MiniLM), and BERT-base on WikiText pieces of exactly 128 and 512 tokens.
  ``--device cpu --base-size tiny`` is a smoke run of the script on a machine without a GPU (its report goes to
  WORK_DIR/gpu-smoke).

    python -m benchmarks.gpu export --sst2-checkpoint DIR --work-dir /tmp/gpu
    python -m benchmarks.gpu measure --sst2-checkpoint DIR --work-dir /tmp/gpu --out benchmarks/results/gpu
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import gpu_processes, gpu_shapes, raw_ort, servers
from benchmarks.datasets import read_sst2
from benchmarks.gpu_report import markdown
from benchmarks.overload_client import closed_loop, percentile
from benchmarks.overload_loads import FALLBACK_TEXTS, bundle_tokenizer, texts_of_tokens, wikitext_text
from benchmarks.random_bert import ensure_checkpoint, export
from benchmarks.studies import core_floor

log = logging.getLogger("benchmarks.gpu")
TASK = "text-classification"
ROUTE = "/v1/text-classification"
EXPORTS: dict[str, tuple[str, list[str]]] = {
    "sst2-fp32": ("sst2", ["--quantize", "none", "--max-length", "128"]),
    "sst2-fp16": ("sst2", ["--quantize", "none", "--precision", "fp16", "--max-length", "128"]),
    "embed-fp32": ("sst2", ["--task", "feature-extraction", "--quantize", "none", "--max-length", "128"]),
    "embed-fp16": ("sst2", ["--task", "feature-extraction", "--quantize", "none", "--precision", "fp16",
                            "--max-length", "128"]),
    "base-fp16": ("base", ["--quantize", "none", "--precision", "fp16"]),
}  # fmt: skip
SERVED = {"sst2": "sst2-fp16", "embed": "embed-fp16", "base": "base-fp16"}
RAW_BATCH_SIZES = (1, 8, 32, 64, 128, 256, 512)
LENGTH_TEXTS = {128: 1024, 512: 384}
PROVIDERS: dict[str, list[Any]] = {
    "cuda": [("CUDAExecutionProvider", {"device_id": "0"}), "CPUExecutionProvider"],
    "cpu": ["CPUExecutionProvider"],  # smoke runs of this script on a machine without a GPU
}


def widen_checkpoint(source: Path, target: Path) -> Path:
    """A copy of ``source`` whose float16 weights are float32 (the checkpoint travels as fp16 to halve its size)."""
    from safetensors.numpy import load_file, save_file

    if (target / "model.safetensors").is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.is_file() and path.suffix != ".safetensors":
            shutil.copy2(path, target / path.name)
    weights = load_file(str(source / "model.safetensors"))
    wide = {name: array.astype(np.float32) if array.dtype == np.float16 else array for name, array in weights.items()}
    save_file(wide, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def export_all(args: argparse.Namespace) -> dict[str, Any]:
    work: Path = args.work_dir
    checkpoints = {"sst2": widen_checkpoint(args.sst2_checkpoint, work / "sst2-checkpoint")}
    started = time.perf_counter()
    logs = work / "logs"
    ensure_checkpoint(work / "base-checkpoint", args.base_size, log_dir=logs, tokenizer_from=checkpoints["sst2"])
    checkpoints["base"] = work / "base-checkpoint"
    built = time.perf_counter() - started

    def one(name: str) -> dict[str, Any]:
        source, options = EXPORTS[name]
        if args.device == "cpu":  # a smoke run: fp16 needs the CUDA provider, so every bundle is fp32
            options = [option for option in options if option not in ("--precision", "fp16")]
        bundle = work / name
        if (bundle / "bundle.json").is_file():
            return {"reused": True}
        run = export(checkpoints[source], bundle, [*options, "--quiet"], work / "logs" / f"export-{name}.log")
        return {"wall_s": round(run.wall_s, 1), "peak_rss_bytes": run.peak_rss_bytes, "command": run.command[1:]}

    with ThreadPoolExecutor(len(EXPORTS)) as pool:
        runs = dict(zip(EXPORTS, pool.map(one, EXPORTS), strict=True))
    return {"base_checkpoint_build_s": round(built, 1), "exports": runs}


def card_facts() -> dict[str, Any]:
    import onnxruntime as ort

    query = "name,driver_version,memory.total"
    smi = "no nvidia-smi"
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return {"gpu": smi, "onnxruntime": ort.__version__, "providers": ort.get_available_providers(),
            "python": platform.python_version(), "cpu_count": os.cpu_count()}  # fmt: skip


def workloads(work: Path) -> dict[str, tuple[str, list[str]]]:
    """Workload -> (served model, texts): SST-2 dev sentences, and WikiText pieces of 128 and 512 tokens."""
    loads = {"sst2": ("sst2", [row.text for row in read_sst2("dev")])}
    try:
        text = wikitext_text()
    except FileNotFoundError:
        text = " ".join(FALLBACK_TEXTS * 20000)
    tokenizer = bundle_tokenizer(work / SERVED["base"])
    for length, count in LENGTH_TEXTS.items():
        loads[f"base-{length}"] = ("base", texts_of_tokens(tokenizer, text, length, count))
    return loads


def cpu_reference(work: Path, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The CPU fp32 bundles' SST-2 logits and sentence embeddings for ``sentences``."""
    answers = []
    for name, output in (("sst2-fp32", "logits"), ("embed-fp32", "sentence_embedding")):
        task = "feature-extraction" if name.startswith("embed") else TASK
        tokenizer = raw_ort.bundle_tokenizer(work / name, task)
        session = raw_ort.ort_session(work / name / "model.onnx")
        rows = []
        for start in range(0, len(sentences), 64):
            encodings = tokenizer.tokenizer.encode_batch(sentences[start : start + 64])
            batch = raw_ort.pad_rows([(e.ids, e.type_ids) for e in encodings], tokenizer.pad_id)
            feeds = {node.name: batch.feeds[node.name] for node in session.get_inputs()}
            rows.append(session.run([output], feeds)[0])
        answers.append(np.concatenate(rows))
    return answers[0], answers[1]


def raw_loop(bundle: Path, texts: list[str], seconds: float, device: str) -> dict[str, Any]:
    """The raw loop: every text tokenized, sorted by length, padded per batch, run; best batch size, batch-1 p50."""
    tokenizer = raw_ort.bundle_tokenizer(bundle, TASK)
    session = raw_ort.ort_session(bundle / "model.onnx", providers=PROVIDERS[device])
    first = PROVIDERS[device][0]
    if session.get_providers()[0] != (first if isinstance(first, str) else first[0]):
        raise RuntimeError(f"the raw loop's session runs on {session.get_providers()}, not {device}")
    raw_ort.one_pass(session, tokenizer, TASK, texts[:64], 64)
    sweep: dict[str, float] = {}
    for size in RAW_BATCH_SIZES:
        raw_ort.one_pass(session, tokenizer, TASK, texts, size)  # this size's shapes allocated once
        passes: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or not passes:
            passes.append(raw_ort.one_pass(session, tokenizer, TASK, texts, size)[0])
        sweep[str(size)] = round(len(texts) * len(passes) / sum(passes), 1)
    singles: list[float] = []
    deadline, index = time.perf_counter() + seconds, 0
    while time.perf_counter() < deadline or len(singles) < 20:
        started = time.perf_counter()
        raw_ort.one_pass(session, tokenizer, TASK, [texts[index % len(texts)]], 1)
        singles.append(time.perf_counter() - started)
        index += 1
    best = max(sweep, key=lambda key: sweep[key])
    return {"sequences_per_s": sweep[best], "best_batch_size": int(best), "sweep": sweep,
            "batch1_p50_ms": round(1000 * statistics.median(singles), 3), "batch1_calls": len(singles)}  # fmt: skip


def core_points(bundle: Path, model: str, texts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """The service's engine in this process on the device, no HTTP (``benchmarks.studies.core_floor``): closed-loop
    clients at c=1 and c=32, one input a request, with its batches' rows and time inside the model. Beside the raw
    loop and the server, it says whether a batch is slower in the service's session or only behind its HTTP. Then
    c=32 again with batches run as they form (``exact-c32``: ``--no-shape-buckets``) against batches padded to the
    service's shape buckets, every bucket run once at start-up (``--shape-buckets``, the default on a GPU; on a CPU
    the smoke times the padding alone): whether a new shape's set-up slows a batch."""
    bodies = [json.dumps({"model": model, "inputs": text, "truncation": True}).encode() for text in texts]
    points: dict[str, Any] = {}
    for prefix, buckets, concurrencies in (("", True, [1, 32]), ("exact-", False, [32])):
        extra = {"shape_buckets": buckets}
        got = asyncio.run(core_floor.measure_core(bundle, "sst2", concurrencies, args.duration, None, args.device,
                                                  bodies, extra))  # fmt: skip
        points.update({f"{prefix}c{point.pop('concurrency')}": point for point in got})
    return points


def batch_counters(port: int, model: str) -> dict[str, float]:
    """The server's batch counters for ``model`` from /metrics: batches, rows, and seconds inside the model (summed
    over its serving processes, one series each with ``--processes``)."""
    text = post_get_text(port, "/metrics")
    found: dict[str, float] = {}
    for key, metric in (("rows", "bertserve_batch_size"), ("run_s", "bertserve_inference_seconds")):
        for part in ("sum", "count"):
            values = re.findall(rf'^{metric}_{part}{{[^}}]*model="{model}"[^}}]*}} (\S+)$', text, re.MULTILINE)
            found[f"{key}_{part}"] = sum(float(value) for value in values)
    return found


def batch_figures(before: dict[str, float], after: dict[str, float], cpu_s: float, requests: int) -> dict[str, Any]:
    batches = after["rows_count"] - before["rows_count"]
    return {
        "batches": int(batches),
        "rows_per_batch": round((after["rows_sum"] - before["rows_sum"]) / batches, 2) if batches else None,
        "run_ms_per_batch": round(1000 * (after["run_s_sum"] - before["run_s_sum"]) / batches, 3) if batches else None,
        "server_cpu_ms_per_request": round(1000 * cpu_s / requests, 3) if requests else None,
    }


async def served_points(
    port: int, model: str, texts: list[str], args: argparse.Namespace, server_pid: int
) -> dict[str, Any]:
    """Closed-loop HTTP load: c=1 (p50), c=32 and c=128 one input a request, c=32 with 16 inputs a request; with the
    server's own figures for each (rows per batch, time per batch inside the model, CPU per request)."""
    points: dict[str, Any] = {}
    plans = [("c1", 1, 1), ("c32", 32, 1), ("c128", 128, 1), ("c32x16", 32, 16)]
    for key, clients, per_request in plans:
        groups = [texts[start : start + per_request] for start in range(0, len(texts), per_request)]
        bodies = [json.dumps({"model": model, "inputs": group if per_request > 1 else group[0],
                              "truncation": True}).encode() for group in groups]  # fmt: skip
        counters, cpu_before = batch_counters(port, model), servers.session_cpu_seconds(server_pid)
        started = time.perf_counter()
        rate, tally = await closed_loop("127.0.0.1", port, ROUTE, bodies, clients, args.warmup, args.duration, 60.0)
        cpu_s = servers.session_cpu_seconds(server_pid) - cpu_before
        inside = batch_figures(counters, batch_counters(port, model), cpu_s, sum(tally.statuses.values()))
        latencies = [lat for lat, end in zip(tally.admitted_latencies, tally.admitted_finished, strict=True)
                     if end > started + args.warmup]  # fmt: skip
        p50 = percentile(latencies, 0.5)
        points[key] = {
            "sequences_per_s": None if rate is None else round(rate * per_request, 1),
            "p50_ms": None if p50 is None else round(1000 * p50, 3),
            "requests": len(latencies), "statuses": dict(sorted(tally.statuses.items())), "server": inside,
        }  # fmt: skip
    return points


def post(port: int, route: str, body: dict[str, Any]) -> Any:
    import httpx

    response = httpx.post(f"http://127.0.0.1:{port}{route}", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def check_answers(port: int, work: Path, dev: list[Any], cpu: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """Served (GPU fp16) against CPU fp32: SST-2 top-1 agreement, accuracy of both, embedding cosines."""
    sentences = [row.text for row in dev]
    served: list[str] = []
    vectors: list[list[float]] = []
    for start in range(0, len(sentences), 32):
        chunk = sentences[start : start + 32]
        answers = post(port, ROUTE, {"model": "sst2", "inputs": chunk})["results"]
        served += [answer[0]["label"] for answer in answers]
        data = post(port, "/v1/embeddings", {"model": "embed", "input": chunk})["data"]
        vectors += [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]
    id2label = json.loads((work / "sst2-fp32" / "bundle.json").read_text())["id2label"]
    reference = [id2label[str(index)] for index in cpu[0].argmax(axis=1)]
    gold = [row.label for row in dev]
    gpu_vectors, cpu_vectors = np.array(vectors, dtype=np.float64), cpu[1].astype(np.float64)
    norms = np.linalg.norm(gpu_vectors, axis=1) * np.linalg.norm(cpu_vectors, axis=1)
    cosines = (gpu_vectors * cpu_vectors).sum(axis=1) / norms
    agree = sum(a == b for a, b in zip(served, reference, strict=True))
    return {
        "sentences": len(sentences), "top1_agreement_pct": round(100 * agree / len(sentences), 3),
        "disagreements": len(sentences) - agree,
        "accuracy_gpu_fp16_pct": _accuracy(served, gold), "accuracy_cpu_fp32_pct": _accuracy(reference, gold),
        "embedding_cosine_min": round(float(cosines.min()), 6),
        "embedding_cosine_mean": round(float(cosines.mean()), 6),
    }  # fmt: skip


def _accuracy(predicted: list[str], gold: list[str]) -> float:
    return round(100 * sum(a == b for a, b in zip(predicted, gold, strict=True)) / len(gold), 2)


def torch_pipeline(checkpoint: Path, texts: list[str], work: Path, seconds: float, device: str) -> dict[str, Any]:
    """``benchmarks.gpu_torch`` in its own process: the transformers pipeline, fp16, on the same card."""
    texts_path = work / f"texts-{checkpoint.name}-{len(texts)}.json"
    texts_path.write_text(json.dumps(texts))
    command = [sys.executable, "-m", "benchmarks.gpu_torch", str(checkpoint), str(texts_path),
               "--seconds", str(seconds), "--device", device]  # fmt: skip
    env = {**os.environ, **servers.OFFLINE_ENV}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


KEPT_FROM_EXPORT = ("commands", "export", "load_avg_start")  # what measure keeps of the report it finds


def drop_measured(results: dict[str, Any]) -> None:
    """Forget an earlier measure's figures (a call cut short, then run again): a report is one measure's, whole or
    cut short, never one run's figures beside another's."""
    for key in [key for key in results if key not in KEPT_FROM_EXPORT]:
        del results[key]


def measure(args: argparse.Namespace, results: dict[str, Any]) -> None:
    work: Path = args.work_dir
    drop_measured(results)
    results["card"] = card_facts()
    loads = workloads(work)
    dev = read_sst2("dev")
    cpu = cpu_reference(work, [row.text for row in dev])
    results["raw_cuda"], results["core"] = {}, {}
    for name, (model, texts) in loads.items():
        results["raw_cuda"][name] = raw_loop(work / SERVED[model], texts, args.raw_seconds, args.device)
        log.info("raw %s: %s", name, results["raw_cuda"][name])
        gc.collect()
        write(results, args.out)  # every finished step on disk: a call cut short keeps what it measured
        results["core"][name] = core_points(work / SERVED[model], model, texts, args)
        log.info("core %s: %s", name, results["core"][name])
        gc.collect()
        write(results, args.out)
    port = servers.free_port()
    command = servers.bertserve_command({name: work / bundle for name, bundle in SERVED.items()}, port)
    command += ["--device", args.device, "--host", "127.0.0.1", "--log-level", "info"]
    command += ["--max-concurrent-requests", "512"]
    results["server_command"] = " ".join(command[1:])
    started = time.perf_counter()
    with servers.running("bertserve-cuda", command, port, "/health/ready", work / "logs") as server:
        results["server_ready_s"] = round(time.perf_counter() - started, 1)
        cards = post_get(port, "/v1/models")["models"]
        results["served_models"] = {card["name"]: {"device": card.get("device"), "batching": card.get("batching")}
                                    for card in cards}  # fmt: skip
        results["answers"] = check_answers(port, work, dev, cpu)
        write(results, args.out)
        results["served"] = {}
        for name, (model, texts) in loads.items():
            results["served"][name] = asyncio.run(served_points(port, model, texts, args, server.pid))
            log.info("served %s: %s", name, results["served"][name])
            write(results, args.out)
        results["server_log_tail"] = server.log_path.read_text(errors="replace")[-4000:]
    write(results, args.out)
    if args.processes:  # more than one serving process on the card (benchmarks.gpu_processes)
        models = {name: work / SERVED[name] for name in ("sst2", "base")}
        chosen = {name: loads[name] for name in ("sst2", "base-128")}
        results["processes"] = gpu_processes.measure(models, chosen, args.processes, args.device, args.warmup,
                                                     args.duration, work / "logs")  # fmt: skip
        write(results, args.out)
    if args.shape_calls:  # what a batch of a new shape costs on the service's session (benchmarks.gpu_shapes)
        shapes_out = args.out.with_name(args.out.name + "-shapes")
        gpu_shapes.main(["--bundle", str(work / SERVED["sst2"]), "--device", args.device,
                         "--calls", str(args.shape_calls), "--out", str(shapes_out)])  # fmt: skip
        results["shapes"] = json.loads(shapes_out.with_suffix(".json").read_text())
    if args.torch_from is not None:  # a run before this one on the same kind of card timed the same pipelines
        results["torch"] = {**json.loads(args.torch_from.read_text())["torch"], "from": str(args.torch_from)}
        return
    results["torch"] = {}
    for name, (model, texts) in loads.items():
        checkpoint = work / ("sst2-checkpoint" if model == "sst2" else "base-checkpoint")
        results["torch"][name] = torch_pipeline(checkpoint, texts, work, args.raw_seconds, args.device)
        log.info("torch %s: %s", name, results["torch"][name])
        write(results, args.out)


def post_get(port: int, route: str) -> Any:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}{route}", timeout=30).json()


def post_get_text(port: int, route: str) -> str:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}{route}", timeout=30).text


def write(results: dict[str, Any], out: Path) -> None:
    results["load_avg_end"] = [round(value, 2) for value in os.getloadavg()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(results))


def server_counts(text: str) -> list[int]:
    return [int(count) for count in text.split(",") if count.strip() not in ("", "0")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=("export", "measure"))
    parser.add_argument("--sst2-checkpoint", type=Path, required=True, help="the MiniLM SST-2 checkpoint folder")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/bertserve-gpu"))
    parser.add_argument(
        "--out",
        type=Path,
        help="report prefix (.json/.md); default benchmarks/results/gpu, and "
        "WORK_DIR/gpu-smoke with --device cpu (a smoke run never replaces the card's report)",
    )
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per served point, after the warm-up")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--raw-seconds", type=float, default=1.0, help="seconds per raw batch size and for batch 1")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke run of the script")
    parser.add_argument("--base-size", choices=("base", "tiny"), default="base", help="tiny: a smoke run")
    parser.add_argument("--shape-calls", type=int, default=300, help="batches of the new-shape study (0: skip it)")
    parser.add_argument("--torch-from", type=Path, help="take the torch pipeline's figures from this earlier report")
    parser.add_argument("--processes", type=server_counts, default=[2, 4],
                        help="--processes counts of the several-processes step (0: skip it)")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.out is None:
        args.out = Path("benchmarks/results/gpu") if args.device == "cuda" else args.work_dir / "gpu-smoke"
    record = args.out.with_suffix(".json")
    results: dict[str, Any] = json.loads(record.read_text()) if record.is_file() and args.stage == "measure" else {}
    results.setdefault("commands", []).append("python -m benchmarks.gpu " + " ".join(argv or sys.argv[1:]))
    results["load_avg_start"] = [round(value, 2) for value in os.getloadavg()]
    if args.stage == "export":
        results["export"] = export_all(args)
    else:
        measure(args, results)
    write(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
