"""Interleaved A/B of two source trees of the service on one bundle: is a change faster, or noise?

Each round starts the server from every tree in turn (order alternating A B, B A, ...), warms it,
loads it with wrk at each concurrency and records sequences/s, p50 and the server's CPU ms per
request. The verdict compares medians over rounds and states the spread: a change is kept only
when its median wins by more than the rounds' own spread. Between two identical trees such a "win" comes by
chance 1 / C(2R, R) of the time at R rounds, as the report says (5 % at 3 rounds, 1.4 % at 4, 0.4 % at 5), so a
small win at 3 rounds wants a rerun; an A/A of one tree against itself (``results/ab/aa-embeddings-1.md``, one
sentence a request, 3 rounds) gave 1.001x.

    git worktree add /tmp/ab-base HEAD
    python -m benchmarks.ab --model sst2=runs/accuracy/bundles/sst2-fp32 --tree base=/tmp/ab-base --tree new=. \\
        --concurrency 32 --rounds 4 --duration 10 --out benchmarks/results/ab-orjson

``--tokens N`` replaces SST-2's sentences by cuts of WikiText-2 of N tokens each ([CLS] and [SEP] included, the
bundle's tokenizer; one per request, 64 of them): a load long enough for the token budget to bind.

``--load`` picks one of the task's loads by name (``--task embeddings --load embeddings-32``: 32 sentences a
request, past the prepare stage's inline limit); the default, its first, is one input a request. The loads of
``benchmarks.overload`` on the task's route are taken too (``--task squad --load qa-long``: a SQuAD question on a
20-70 KB context).

``--protocol`` sends the same load in another protocol's shape to the same model: ``v2`` (Open Inference
Protocol infer, any task), ``tei`` (``/embed`` for embeddings, ``/rerank`` for rerank); default: the task's
own route (``/v1/...``, ``/v1/embeddings`` for embeddings).

Both trees run with this interpreter (the same installed packages); ``python -m service`` started in
a tree imports that tree's ``service`` and ``model_export``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from benchmarks import loadgen, servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import Load, bertserve_loads, bertserve_path
from benchmarks.overload_loads import LOADS as OVERLOAD_LOADS
from benchmarks.overload_loads import request_bodies
from benchmarks.report import load_average, write_report

log = logging.getLogger("benchmarks.ab")
LOG_DIR = SCRATCH_DIR / "ab-logs"


def text_tensor(name: str, texts: list[str]) -> dict[str, Any]:
    return {"name": name, "shape": [len(texts)], "datatype": "BYTES", "data": texts}


def v2_inputs(task: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A load body's inputs as Open Inference Protocol tensors (service.oip.LAYOUTS names them)."""
    if task == "squad":
        return [
            text_tensor("question", [body["inputs"]["question"]]),
            text_tensor("context", [body["inputs"]["context"]]),
        ]
    if task == "rerank":
        return [text_tensor("query", [body["query"]]), text_tensor("documents", body["documents"])]
    texts = body["input"] if task == "embeddings" else body["inputs"]
    return [text_tensor("text", texts if isinstance(texts, list) else [texts])]


def protocol_requests(
    task: str, protocol: str | None, bodies: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    """The load's (path, bodies) in ``protocol``'s shape (None: the task's own route)."""
    if protocol is None:
        return bertserve_path(task), bodies
    model = bodies[0]["model"]
    if protocol == "v2":
        return f"/v2/models/{model}/infer", [{"inputs": v2_inputs(task, body)} for body in bodies]
    if protocol == "tei" and task == "embeddings":
        return "/embed", [{"model": model, "inputs": body["input"]} for body in bodies]
    if protocol == "tei" and task == "rerank":
        return "/rerank", [{"model": model, "query": body["query"], "texts": body["documents"]} for body in bodies]
    raise ValueError(f"no {protocol} route for {task}")


def long_load(model: str, bundle: Path, tokens: int) -> Load:
    """One text-classification request per cut of ``tokens`` tokens (benchmarks.big_models' inputs)."""
    from benchmarks.big_models import length_inputs

    texts = length_inputs(bundle, [tokens])[tokens]
    return Load(f"tokens-{tokens}", [{"model": model, "inputs": text} for text in texts])


def measure_tree(args: argparse.Namespace, label: str, tree: Path, bodies: Path, path: str) -> list[dict[str, Any]]:
    port = servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
               "--model", f"{args.name}={args.model_path}", *shlex.split(args.server_args),
               *shlex.split(args.tree_args.get(label, ""))]  # fmt: skip
    points = []
    with servers.running(f"ab-{label}", command, port, "/health/ready", LOG_DIR, cwd=tree) as server:
        url = server.base_url + path
        for concurrency in args.concurrency:
            loadgen.run_wrk(url, bodies, concurrency, args.warmup)
            cpu_before, wall_before = server.cpu_seconds(), time.monotonic()
            result = loadgen.run_wrk(url, bodies, concurrency, args.duration, sequences_per_request=args.sequences)
            cpu, wall = server.cpu_seconds() - cpu_before, time.monotonic() - wall_before
            requests = max(1, result.requests)
            points.append({
                "tree": label, "concurrency": concurrency, "sequences_per_s": round(result.sequences_per_s, 2),
                "p50_ms": round(result.p50_ms, 2), "errors": result.errors,
                "cpu_ms_per_request": round(1000 * cpu / requests, 3), "cpu_cores": round(cpu / wall, 2),
            })  # fmt: skip
            log.info("%s c=%d: %.1f seq/s, p50 %.1f ms, %.2f CPU ms/request", label, concurrency,
                     result.sequences_per_s, result.p50_ms, 1000 * cpu / requests)  # fmt: skip
    return points


def revision(tree: Path) -> str:
    """The tree's commit, and whether it has uncommitted changes (never its path: results are committed)."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)  # fmt: skip
    return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def verdict(points: list[dict[str, Any]], labels: list[str], concurrency: list[int]) -> list[dict[str, Any]]:
    """Per concurrency: each tree's median and range over rounds; the last tree against the first."""
    rows = []
    for level in concurrency:
        stats = {}
        for label in labels:
            values = [p["sequences_per_s"] for p in points if p["tree"] == label and p["concurrency"] == level]
            cpu = [p["cpu_ms_per_request"] for p in points if p["tree"] == label and p["concurrency"] == level]
            stats[label] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                            "cpu_ms_median": statistics.median(cpu)}  # fmt: skip
        base, new = stats[labels[0]], stats[labels[-1]]
        rows.append({
            "concurrency": level, "trees": stats,
            "ratio": round(new["median"] / base["median"], 3) if base["median"] else None,
            "wins_beyond_spread": new["min"] > base["max"], "loses_beyond_spread": new["max"] < base["min"],
        })  # fmt: skip
    return rows


def markdown(summary: dict[str, Any]) -> str:
    labels = summary["labels"]
    lines = [
        f"# A/B: {' vs '.join(labels)}",
        "",
        f"Model `{summary['model']}`, `POST {summary['path']}` ({summary.get('load', 'sst2')}), "
        f"{summary['rounds']} interleaved rounds, "
        f"{summary['duration_s']:.0f} s per point "
        f"after {summary['warmup_s']:.0f} s warm-up; server args `{summary['server_args'] or '(defaults)'}`. "
        f"Load average at start {summary['load_avg']['start']}, at end {summary['load_avg']['end']}.",
        "",
        *(f"- {label}: {rev}" for label, rev in summary["trees"].items()),
        "",
        "| concurrency | "
        + " | ".join(f"{label} seq/s median [min-max] (CPU ms/req)" for label in labels)
        + f" | {labels[-1]}/{labels[0]} | beyond spread |",
        "| ---: | " + " | ".join("---" for _ in labels) + " | ---: | --- |",
    ]
    for row in summary["verdict"]:
        cells = [
            f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}] ({s['cpu_ms_median']:.2f})"
            for s in (row["trees"][label] for label in labels)
        ]
        beyond = "win" if row["wins_beyond_spread"] else "loss" if row["loses_beyond_spread"] else "no"
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.3f}"
        lines.append(f"| {row['concurrency']} | " + " | ".join(cells) + f" | {ratio} | {beyond} |")
    chance = 100 / math.comb(2 * summary["rounds"], summary["rounds"])
    lines += [
        "",
        f'Two identical trees give a "win" (every round of one above every round of the other) by chance '
        f'{chance:.1f} % of the time at {summary["rounds"]} rounds, and as often a "loss", per concurrency level.',
    ]
    return "\n".join(lines) + "\n"


def task_load(args: argparse.Namespace) -> Load:
    """The task's load named ``--load`` (default: its first, e.g. embeddings-1 of embeddings-1 and embeddings-32), or
    one of ``benchmarks.overload``'s on the task's route (``--task squad --load qa-long``: 20-70 KB contexts)."""
    loads = {load.name: load for load in bertserve_loads(args.task, args.name)}
    if args.load is None:
        return next(iter(loads.values()))
    if args.load in loads:
        return loads[args.load]
    long = OVERLOAD_LOADS.get(args.load)
    if long is not None and long.path == bertserve_path(args.task):
        bodies = request_bodies(long, args.name, Tokenizer.from_file(str(args.model_path / "tokenizer.json")))
        return Load(long.name, bodies)
    same_route = [name for name, spec in OVERLOAD_LOADS.items() if spec.path == bertserve_path(args.task)]
    raise ValueError(f"--load {args.load}: the {args.task} loads are {', '.join([*loads, *same_route])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="NAME=PATH of a text-classification bundle (SST-2 load)")
    parser.add_argument("--tree", action="append", required=True, help="LABEL=PATH of a source tree (two or more)")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[32])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--task", default="sst2", help="the load, as benchmarks.run names it")
    parser.add_argument("--load", help="which of the task's loads (embeddings-1, embeddings-32); default its first")
    parser.add_argument("--tokens", type=int, help="send text-classification inputs of this many tokens instead")
    parser.add_argument("--protocol", choices=("v2", "tei"), help="send the load in this protocol's shape")
    parser.add_argument("--server-args", default="", help="extra flags for python -m service (every tree)")
    parser.add_argument("--args", action="append", default=[], help="LABEL=FLAGS: extra flags for one tree only")
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.name, _, model_path = args.model.partition("=")
    args.model_path = Path(model_path).resolve()
    args.tree_args = dict(item.partition("=")[::2] for item in args.args)
    trees = [(label, Path(path).resolve()) for label, _, path in (tree.partition("=") for tree in args.tree)]
    if len(trees) < 2:
        parser.error("give two trees or more: --tree base=PATH --tree new=PATH")
    if args.tokens and (args.task != "sst2" or not 3 <= args.tokens <= 512):
        parser.error("--tokens goes with the text-classification load (--task sst2), 3..512 tokens")
    try:
        load = long_load(args.name, args.model_path, args.tokens) if args.tokens else task_load(args)
        path, requests = protocol_requests(args.task, args.protocol, load.bodies)
    except ValueError as exc:
        parser.error(str(exc))
    args.sequences = load.sequences_per_request
    bodies = loadgen.write_bodies(requests, LOG_DIR / f"bodies-{load.name}-{args.protocol or 'own'}.jsonl")
    load_at_start = os.getloadavg()
    points: list[dict[str, Any]] = []
    for round_index in range(args.rounds):
        order = trees if round_index % 2 == 0 else trees[::-1]
        for label, tree in order:
            for point in measure_tree(args, label, tree, bodies, path):
                points.append({"round": round_index, **point})
    labels = [label for label, _ in trees]
    described = {
        label: revision(tree) + (f" with `{args.tree_args[label]}`" if label in args.tree_args else "")
        for label, tree in trees
    }
    summary = {
        "model": args.model, "load": load.name, "path": path, "labels": labels, "trees": described,
        "rounds": args.rounds, "duration_s": args.duration, "warmup_s": args.warmup, "server_args": args.server_args,
        "points": points, "verdict": verdict(points, labels, args.concurrency),
        "load_avg": load_average(load_at_start),
    }  # fmt: skip
    write_report(args.out, summary, markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
