"""What a small model pays outside the model: the server's CPU per request against the raw loop's CPU per sequence.

For each model (a load of ``benchmarks.loads``: ``sst2`` on ``/v1/text-classification``, ``embeddings`` on
``/v1/embeddings``, one sentence per request) it measures, side by side in one run:

- the raw loop (``benchmarks.raw_ort.measure``): one in-process ORT session over the SST-2 dev sentences in
  length-sorted chunks, the best batch size; its CPU time per sequence;
- the server (``python -m service``, default settings) under wrk at each concurrency: sequences/s, p50, and its
  CPU time per request (every thread of its process, from /proc);
- ``overhead ms/request`` = server CPU per request - raw CPU per sequence: HTTP, JSON, validation, hand-offs and
  bookkeeping, everything the raw loop does not do;
- with ``--profile``, py-spy samples the server's Python threads over the measured window and each sample is put
  in one stage by its innermost recognisable frame (``STAGES``); a stage's ms/request is its share of the samples
  times the CPU per request (native time outside Python threads, ORT's own pool, is not sampled: it stays in
  "ORT run" through the worker's wait on it).

    python -m benchmarks.overhead --model sst2=benchmarks/scratch/ab-sst2-fp32 \\
        --model embeddings=benchmarks/scratch/minilm-embeddings --concurrency 32,128 --profile \\
        --out benchmarks/results/overhead
"""

from __future__ import annotations

import argparse
import collections
import itertools
import logging
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import loadgen, profile, raw_ort, servers
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.gpu_torch import timed
from benchmarks.loads import ROUTES, bertserve_loads, bertserve_path, load_inputs
from benchmarks.report import load_average, write_report

log = logging.getLogger("benchmarks.overhead")
LOG_DIR = SCRATCH_DIR / "overhead-logs"

# (stage, pattern on one py-spy frame "function (file:line)"): a sample goes to the first stage, in this order,
# that matches a frame of its stack, searched from the innermost frame outwards.
STAGES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (stage, re.compile(pattern))
    for stage, pattern in (
        ("ORT run", r"onnxruntime/capi/onnxruntime_inference_collection\.py"),
        ("pad", r"contract/onnx_io\.py"),
        ("tokenize", r"tokenizers|encode_batch|truncating_tokenizer"),
        ("post-process", r"^(postprocess|_postprocess) "),
        ("JSON decode", r"^(parse_json|check_shape|loads|decode|raw_decode) .*(bodies|json/)"),
        ("validation", r"pydantic|validated_json_body|to_task|as_inference"),
        ("JSON encode", r"encode_json|json/encoder"),
        ("metrics", r"prometheus_client|service/metrics\.py"),
        ("HTTP parse", r"httptools_impl\.py"),
        ("send", r"send_body|transports|selector_events\.py.*(write|_write)"),
        ("queue and hand-offs", r"service/batcher\.py|futures|threading\.py|queue\.py|call_soon_threadsafe"),
        ("event loop", r"asyncio/(base_events|events|tasks)\.py|uvloop"),
        ("middleware and entry", r"service/middleware\.py|service/api/entry\.py"),
        ("engine and core", r"service/(engine|core|prepare_stage|runtime)\.py"),
    )
)


def stage_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        for stage, pattern in STAGES:
            if pattern.search(frame):
                return stage
    return "other"


def stages(collapsed: str) -> dict[str, float]:
    """Each stage's share (0-1) of the samples of py-spy's raw output (``thread;frame;...;leaf count``)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stage_of(stack.split(";")[1:])] += int(count)
    total = sum(counts.values())
    return {stage: count / total for stage, count in counts.most_common()} if total else {}


def measure_raw(bundle: Path, load: str, duration_s: float) -> dict[str, Any]:
    inputs = load_inputs(load)
    result = raw_ort.measure(bundle, ROUTES[load], inputs, duration_s)
    alone = [round(batch_one_ms(bundle, ROUTES[load], inputs, duration_s / 3, pause), 3) for pause in (0.0, PACE_S)]
    return {"sequences_per_s": round(result.sequences_per_s, 2), "batch_size": result.batch_size,
            "cpu_ms_per_sequence": round(1000 * result.cpu_seconds / result.inputs, 3),
            "batch1_median_ms": alone[0], "batch1_paced_median_ms": alone[1]}  # fmt: skip


# A lone request's run follows the last one after its answer went out and the next request came in (about a
# millisecond at c=1 here): the cores idle meanwhile, and a run after an idle pause is slower than back to back.
PACE_S = 0.001


def batch_one_ms(bundle: Path, task: str, inputs: list[Any], seconds: float, pause_s: float = 0.0) -> float:
    """The raw loop's median time for one input alone (tokenize, pad, run; both threads, the faster of spinning
    or not): what a lone request's p50 is held against. ``pause_s``: each call after that long idle (the
    calls back to back when 0)."""
    tokenizer = raw_ort.bundle_tokenizer(bundle, task)
    medians = []
    for spin in (True, False):
        session = raw_ort.open_session(bundle / "model.onnx", spin=spin)
        raw_ort.one_pass(session, tokenizer, task, inputs[:2], 1)
        singles = itertools.cycle(inputs)

        def alone(session: Any = session, singles: Any = singles) -> None:
            raw_ort.one_pass(session, tokenizer, task, [next(singles)], 1)

        times = timed(alone, seconds / 2, 3) if not pause_s else paced(alone, seconds / 2, pause_s)
        medians.append(1000 * statistics.median(times))
    return min(medians)


def paced(call: Any, seconds: float, pause_s: float) -> list[float]:
    """Each call's seconds, every call after ``pause_s`` asleep, for ``seconds`` (at least 3 calls)."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 3:
        time.sleep(pause_s)
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def measure_server(args: argparse.Namespace, name: str, bundle: Path, load: str) -> list[dict[str, Any]]:
    first = bertserve_loads(load, name)[0]  # one sentence per request (embeddings-1)
    bodies = loadgen.write_bodies(first.bodies, LOG_DIR / f"bodies-{load}.jsonl")
    port = servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
               "--model", f"{name}={bundle}"]  # fmt: skip
    points = []
    with servers.running(f"overhead-{name}", command, port, "/health/ready", LOG_DIR) as server:
        url = server.base_url + bertserve_path(load)
        for concurrency in args.concurrency:
            loadgen.run_wrk(url, bodies, concurrency, args.warmup)
            spy_out = LOG_DIR / f"profile-{name}-c{concurrency}.txt"
            spy = profile.start_py_spy(server.pid, args.duration, spy_out) if args.profile else None
            cpu_before, wall_before = server.cpu_seconds(), time.monotonic()
            result = loadgen.run_wrk(url, bodies, concurrency, args.duration)
            cpu, wall = server.cpu_seconds() - cpu_before, time.monotonic() - wall_before
            if spy is not None:
                spy.communicate(timeout=120)
            requests = max(1, result.requests)
            point = {"concurrency": concurrency, "sequences_per_s": round(result.sequences_per_s, 2),
                     "p50_ms": round(result.p50_ms, 2), "errors": result.errors,
                     "cpu_ms_per_request": round(1000 * cpu / requests, 3),
                     "cores_busy": round(cpu / wall, 2),
                     "client_cpu_ms_per_request": round(1000 * result.client_cpu_s / requests, 3)}  # fmt: skip
            if spy is not None and spy_out.exists():
                point["stages"] = {stage: round(share, 4) for stage, share in stages(spy_out.read_text()).items()}
            points.append(point)
            log.info("%s c=%d: %.1f seq/s, %.3f CPU ms/request", name, concurrency, result.sequences_per_s,
                     1000 * cpu / requests)  # fmt: skip
    return points


TABLE_HEAD = (
    "| model | route | c | served seq/s | raw seq/s | served/raw | server CPU ms/req | raw CPU ms/seq "
    "| overhead ms/req | wrk CPU ms/req | p50 ms | p50 - raw batch-1 ms |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def markdown(report: dict[str, Any]) -> str:
    intro = (
        f"Tree {report['tree']}; {report['duration_s']:.0f} s per point; load average at start "
        f"{report['load_avg']['start']}, at end {report['load_avg']['end']}. Overhead = server CPU per request "
        "- raw loop CPU per sequence (one sentence per request); at c=1, p50 against the raw loop's median for one "
        "input alone (tokenize, pad, run), back to back and (paced) each after 1 ms idle, as a lone request's run "
        "comes. The load generator (wrk) runs on the same cores: its CPU per request is time the raw loop never "
        "shares."
    )
    lines = ["# Overhead per request (benchmarks.overhead)", "", intro, "", TABLE_HEAD]
    for model in report["models"]:
        raw = model["raw"]
        for point in model["served"]:
            overhead = point["cpu_ms_per_request"] - raw["cpu_ms_per_sequence"]
            client = f"{point['client_cpu_ms_per_request']:.2f}" if "client_cpu_ms_per_request" in point else "-"
            alone, paced_alone = raw.get("batch1_median_ms"), raw.get("batch1_paced_median_ms")
            lone = f"{point['p50_ms'] - alone:+.2f} (raw {alone:.2f})" if point["concurrency"] == 1 and alone else ""
            if lone and paced_alone:
                lone += f"; {point['p50_ms'] - paced_alone:+.2f} (paced {paced_alone:.2f})"
            lines.append(
                f"| {model['name']} | `{model['route']}` | {point['concurrency']} | {point['sequences_per_s']:.1f} "
                f"| {raw['sequences_per_s']:.1f} | {point['sequences_per_s'] / raw['sequences_per_s']:.2f} "
                f"| {point['cpu_ms_per_request']:.2f} | {raw['cpu_ms_per_sequence']:.2f} | {overhead:.2f} "
                f"| {client} | {point['p50_ms']:.1f} | {lone} |"
            )
    profiled = [(m, p) for m in report["models"] for p in m["served"] if p.get("stages")]
    if profiled:
        lines += ["", "## Where the server's Python threads spend it (py-spy samples, ms per request)", ""]
        names = sorted({stage for _, p in profiled for stage in p["stages"]})
        lines.append("| stage | " + " | ".join(f"{m['name']} c={p['concurrency']}" for m, p in profiled) + " |")
        lines.append("| --- | " + " | ".join("---:" for _ in profiled) + " |")
        for stage in sorted(names, key=lambda s: -max(p["stages"].get(s, 0) for _, p in profiled)):
            cells = [f"{p['stages'].get(stage, 0) * p['cpu_ms_per_request']:.2f}" for _, p in profiled]
            lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overhead", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", action="append", required=True,
        help="LOAD=BUNDLE: sst2 (a text-classification bundle) or embeddings (a feature-extraction one)",
    )  # fmt: skip
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[32])
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--profile", action="store_true", help="py-spy the server over each measured window")
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_at_start = os.getloadavg()
    models = []
    for item in args.model:
        load, _, path = item.partition("=")
        bundle = Path(path).resolve()
        models.append({"name": load, "route": bertserve_path(load), "raw": measure_raw(bundle, load, args.duration),
                       "served": measure_server(args, load, bundle, load)})  # fmt: skip
    from benchmarks.ab import revision

    report = {"tree": revision(REPO_ROOT), "duration_s": args.duration, "models": models,
              "load_avg": load_average(load_at_start)}  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
