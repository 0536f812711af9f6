"""``python -m benchmarks.run`` (``make bench``): throughput, latency and served accuracy in one run.

Sets up what it needs (wrk check, fine-tuned MiniLM checkpoints via the training CLI, fp32/int8 bundles via
model_export, the infinity-emb venv), then measures raw onnxruntime, bertserve fp32/int8, a naive transformers
pipeline app and infinity-emb under the same wrk load, and writes results.{md,json} and PNG plots.

Besides the fine-tuned tasks, infinity-emb's own job: embeddings (requests of 1 and of 32 SST-2 dev sentences,
all-MiniLM-L6-v2) and rerank (1 query + 16 documents: an RTE dev premise, its hypothesis and 15 others).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import datasets, loadgen, models, profile, raw_ort, report, served_scores, servers
from benchmarks.infinity_setup import ensure_infinity_venv
from benchmarks.loads import (
    INFINITY_TASKS,
    ROUTES,
    bertserve_loads,
    bertserve_path,
    infinity_loads,
    load_inputs,
    raw_inputs,
)

log = logging.getLogger("bench")
RESULTS_DIR = Path(__file__).with_name("results")
SCRATCH_DIR = Path(__file__).with_name("scratch")
TASKS = ("sst2", "squad", "conll", "embeddings", "rerank")
SYSTEMS = ("raw", "bertserve", "naive", "infinity")
PROFILE_CONCURRENCY = 32


def scrape_padding(base_url: str, model: str) -> tuple[float, float]:
    """(padding tokens, real tokens) counted so far by bertserve's /metrics for ``model``."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {"padding": 0.0, "real": 0.0}
    for line in text.splitlines():
        for key, metric in (("padding", "bertserve_padding_tokens_total"), ("real", "bertserve_real_tokens_total")):
            if line.startswith(metric + "{") and f'model="{model}"' in line:
                values[key] = float(line.rsplit(" ", 1)[1])
    return values["padding"], values["real"]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.started = time.monotonic()
        self.results: dict[str, Any] = {
            "command": "python -m benchmarks.run " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": report.machine_facts(),
            "settings": {
                "duration_s": args.duration,
                "warmup_s": args.warmup,
                "concurrency": args.concurrency,
                "bertserve_args": args.bertserve_args,
            },
            "models": {},
            "raw": [],
            "throughput": [],
            "accuracy": {},
        }
        if args.merge:
            self.merge_previous(args.out / "results.json")
        self.bodies_dir = SCRATCH_DIR / "bodies"
        self.logs_dir = SCRATCH_DIR / "logs"

    def merge_previous(self, path: Path) -> None:
        """Keep the parts of an earlier run that this run does not measure (accuracy or throughput)."""
        if not path.is_file():
            return
        previous = json.loads(path.read_text())
        kept = []
        if not self.args.accuracy and previous.get("accuracy"):
            self.results["accuracy"] = previous["accuracy"]
            kept.append("accuracy")
        if not self.args.throughput:
            for key in ("raw", "throughput", "profile"):
                if previous.get(key):
                    self.results[key] = previous[key]
            self.results["settings"] = previous.get("settings", self.results["settings"])
            kept.append("throughput")
        if kept:
            self.results["models"] = {**previous.get("models", {}), **self.results["models"]}
            # only the runs that measured what is kept are named as its source
            earlier = [run for run in previous.get("earlier_runs", []) if set(run["kept"]) & set(kept)]
            measured = [part for part in kept if part not in {p for run in earlier for p in run["kept"]}]
            if measured:
                earlier.append(
                    {"command": previous["command"], "started": previous["started"], "kept": measured,
                     "load_average": previous.get("machine", {}).get("load_average_at_save")}
                )  # fmt: skip
            self.results["earlier_runs"] = earlier

    def save(self) -> None:
        self.results["wall_minutes"] = round((time.monotonic() - self.started) / 60, 1)
        self.results["machine"]["load_average_at_save"] = [round(value, 1) for value in os.getloadavg()]
        for path in report.write(self.results, self.args.out):
            log.info("wrote %s", path)

    def prepare_models(self, names: list[str]) -> None:
        for name in names:
            for quantization in models.QUANTIZATIONS:
                key = f"{name}-{quantization}"
                try:
                    bundle = models.ensure_bundle(name, quantization, self.args.train_scale)
                except subprocess.CalledProcessError as error:
                    # e.g. an int8 graph that fails the exporter's agreement check: measure the rest
                    log.error("no %s bundle: %s", key, error)
                    self.results["models"][key] = {"error": f"export or training failed: {error}"}
                    continue
                checkpoint = models.ensure_checkpoint(name, self.args.train_scale)
                self.results["models"][key] = {
                    "bundle": shown_path(bundle),
                    "checkpoint": shown_path(checkpoint),
                    "recipe": models.recipe_facts(name),
                    **models.bundle_facts(bundle),
                }

    def run_raw(self, task: str) -> None:
        inputs = raw_inputs(task, load_inputs(task))
        for quantization in models.QUANTIZATIONS:
            bundle = models.bundle_dir(task, quantization, self.args.train_scale)
            if not self.have_bundle(task, quantization):
                continue
            for result in (
                raw_ort.measure(bundle, ROUTES[task], inputs, self.args.duration),
                raw_ort.measure_global(bundle, ROUTES[task], inputs),
            ):
                log.info("raw ORT %s %s %s: %.1f seq/s (batch %d)", result.method, task, quantization,
                         result.sequences_per_s, result.batch_size)  # fmt: skip
                self.results["raw"].append({"task": task, "variant": quantization, **result.to_json()})

    def sweep(
        self, task: str, system: str, server: servers.Server, path: str, bodies: Path, model: str | None,
        sequences_per_request: int = 1,
    ) -> None:  # fmt: skip
        for concurrency in self.args.concurrency:
            url = server.base_url + path
            if self.args.warmup > 0:
                loadgen.run_wrk(url, bodies, concurrency, self.args.warmup)
            before = scrape_padding(server.base_url, model) if model else None
            cpu_before, wall_before = server.cpu_seconds(), time.monotonic()
            result = loadgen.run_wrk(url, bodies, concurrency, self.args.duration,
                                     sequences_per_request=sequences_per_request)  # fmt: skip
            cpu, wall = server.cpu_seconds() - cpu_before, time.monotonic() - wall_before
            waste = None
            if before is not None and model:
                padding, real = (after - start for after, start in zip(scrape_padding(server.base_url, model), before,
                                                                       strict=True))  # fmt: skip
                waste = padding / (padding + real) if padding + real else None
            per_request = round(1000 * cpu / result.requests, 3) if result.requests else None
            row = {"task": task, "system": system, **result.to_json(), "padding_waste": waste,
                   "server_cpu_s": round(cpu, 3), "server_cores_busy": round(cpu / wall, 2),
                   "cpu_ms_per_request": per_request}  # fmt: skip
            log.info("%s %s c=%d: %.1f seq/s p50 %.0f ms p99 %.0f ms errors %d, server CPU %.2f ms/request",
                     task, system, concurrency, result.sequences_per_s, result.p50_ms, result.p99_ms, result.errors,
                     per_request or 0.0)  # fmt: skip
            self.results["throughput"].append(row)

    def have_bundle(self, name: str, quantization: str) -> bool:
        return "error" not in self.results["models"].get(f"{name}-{quantization}", {"error": "not prepared"})

    def run_bertserve(self, task: str, quantization: str) -> None:
        name = f"{task}-{quantization}"
        if not self.have_bundle(task, quantization):
            return
        port = servers.free_port()
        command = servers.bertserve_command({name: models.bundle_dir(task, quantization, self.args.train_scale)}, port)
        command += ["--log-level", "warning", *shlex.split(self.args.bertserve_args)]
        with servers.running(f"bertserve-{name}", command, port, "/health/ready", self.logs_dir) as server:
            for load in bertserve_loads(task, name):
                bodies = loadgen.write_bodies(load.bodies, self.bodies_dir / f"bertserve-{load.name}.jsonl")
                self.sweep(load.name, f"bertserve-{quantization}", server, bertserve_path(task), bodies, name,
                           load.sequences_per_request)  # fmt: skip
            bodies = self.bodies_dir / f"bertserve-{task}.jsonl"
            if self.args.profile and task == "sst2" and quantization == "fp32":
                self.profile_server(server, f"/v1/{ROUTES[task]}", bodies)

    def profile_server(self, server: servers.Server, path: str, bodies: Path) -> None:
        out = SCRATCH_DIR / "profile-bertserve-sst2-fp32.txt"
        spy = profile.start_py_spy(server.pid, self.args.duration, out)
        loadgen.run_wrk(server.base_url + path, bodies, PROFILE_CONCURRENCY, self.args.duration + 1)
        summary = profile.finish_py_spy(spy, out)
        if summary:
            raw_file = out.relative_to(datasets.REPO_ROOT) if out.is_relative_to(datasets.REPO_ROOT) else out
            self.results["profile"] = {"concurrency": PROFILE_CONCURRENCY, "raw_file": str(raw_file), **summary}

    def run_naive(self) -> None:
        checkpoint = models.ensure_checkpoint("sst2", self.args.train_scale)
        bodies = self.bodies_dir / "bertserve-sst2.jsonl"
        loadgen.write_bodies([{"inputs": text} for text in load_inputs("sst2")], bodies.with_name("naive-sst2.jsonl"))
        port = servers.free_port()
        env = servers.naive_env(checkpoint, "text-classification")
        with servers.running("naive-sst2", servers.naive_command(port), port, "/health", self.logs_dir, env) as server:
            self.sweep("sst2", "naive", server, "/v1/text-classification", bodies.with_name("naive-sst2.jsonl"), None)

    def run_infinity(self, task: str) -> None:
        venv = ensure_infinity_venv()
        checkpoint = models.ensure_checkpoint(task, self.args.train_scale)
        path = {"sst2": "/classify", "embeddings": "/embeddings", "rerank": "/rerank"}[task]
        port = servers.free_port()
        command = [*servers.infinity_command(venv, checkpoint, task, port), "--log-level", "warning"]
        with servers.running(f"infinity-{task}", command, port, "/models", self.logs_dir) as server:
            for load in infinity_loads(task):
                bodies = loadgen.write_bodies(load.bodies, self.bodies_dir / f"infinity-{load.name}.jsonl")
                self.sweep(load.name, "infinity", server, path, bodies, None, load.sequences_per_request)

    def run_accuracy(self) -> None:
        names = ["sst2", "rte", "conll", "squad"]
        self.prepare_models(names)
        scale = self.args.train_scale
        bundles = {
            f"{n}-{q}": models.bundle_dir(n, q, scale)
            for n in names
            for q in models.QUANTIZATIONS
            if self.have_bundle(n, q)
        }
        port = servers.free_port()
        command = [*servers.bertserve_command(bundles, port), "--log-level", "warning"]
        limit = self.args.max_eval
        squad_start = int(models.SQUAD_EVAL_ARTICLES.split(":")[0])
        evaluations = {
            "sst2": ("SST-2 dev", "accuracy",
                     lambda s: served_scores.classification_accuracy(s, datasets.read_sst2()[:limit])),
            "rte": ("RTE dev", "accuracy",
                    lambda s: served_scores.classification_accuracy(s, datasets.read_rte()[:limit])),
            "conll": ("CoNLL-2003 valid", "f1", lambda s: served_scores.entity_f1(s, datasets.read_conll()[:limit])),
            "squad": (f"SQuAD v1.1 dev-subset articles {models.SQUAD_EVAL_ARTICLES} (trained on "
                      f"{models.SQUAD_TRAIN_ARTICLES})", "f1",
                      lambda s: served_scores.squad_scores(s, datasets.read_squad(squad_start)[:limit])),
        }  # fmt: skip
        with servers.running("bertserve-accuracy", command, port, "/health/ready", self.logs_dir) as server:
            for name, (dataset, metric, evaluate) in evaluations.items():
                published = served_scores.PUBLISHED[name]
                scores: dict[str, Any] = {"dataset": dataset, "metric": metric, "published": published}
                scores["training"] = models.training_summary(models.ensure_checkpoint(name, scale))
                for quantization in models.QUANTIZATIONS:
                    if f"{name}-{quantization}" not in bundles:
                        continue
                    scores[quantization] = evaluate(served_scores.Served(server.base_url, f"{name}-{quantization}"))
                    log.info("accuracy %s %s: %s", name, quantization, scores[quantization])
                self.results["accuracy"][name] = scores
                self.save()

    def run(self) -> None:
        args = self.args
        loadgen.require_wrk()
        if args.throughput:
            self.prepare_models(list(args.tasks))
            if "infinity" in args.systems and set(INFINITY_TASKS) & set(args.tasks):
                ensure_infinity_venv()
            for task in args.tasks:
                if "raw" in args.systems:
                    self.run_raw(task)
                    self.save()
                if "bertserve" in args.systems:
                    for quantization in models.QUANTIZATIONS:
                        self.run_bertserve(task, quantization)
                        self.save()
            if "sst2" in args.tasks and "naive" in args.systems:
                self.run_naive()
                self.save()
            for task in (task for task in INFINITY_TASKS if task in args.tasks and "infinity" in args.systems):
                self.run_infinity(task)
                self.save()
        if args.accuracy:
            self.run_accuracy()
        self.save()
        print_summary(self.results)


def shown_path(path: Path) -> str:
    """A path as results show it: relative to the repository, else its last two parts (no machine paths)."""
    return str(
        path.relative_to(datasets.REPO_ROOT) if path.is_relative_to(datasets.REPO_ROOT) else Path(*path.parts[-2:])
    )


def print_summary(results: dict[str, Any]) -> None:
    for entry in results.get("ratios", []):
        ratios = ", ".join(f"{key} {value:.2f}" for key, value in entry.items() if key not in ("task", "concurrency"))
        print(f"{entry['task']:6s} c={entry['concurrency']:<4d} {ratios}")
    for verdict in results.get("targets", []):
        print(f"{'MET ' if verdict['met'] else 'MISS'} {verdict['task']:6s} {verdict['target']}: {verdict['worst']}")
    for name, scores in results.get("accuracy", {}).items():
        metric = scores["metric"]
        values = ", ".join(f"{q} {scores[q][metric]:.2f}" for q in models.QUANTIZATIONS if q in scores)
        print(f"accuracy {name:6s} {metric}: {values}")


def interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def csv_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per concurrency point")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured load before each point")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in csv_list(t)], default=[1, 8, 32, 128])
    parser.add_argument("--tasks", type=csv_list, default=list(TASKS), help=f"subset of {','.join(TASKS)}")
    parser.add_argument("--systems", type=csv_list, default=list(SYSTEMS), help=f"subset of {','.join(SYSTEMS)}")
    parser.add_argument("--no-throughput", dest="throughput", action="store_false", help="accuracy only")
    parser.add_argument("--no-accuracy", dest="accuracy", action="store_false", help="throughput only")
    parser.add_argument("--max-eval", type=int, default=None, help="evaluate only the first N examples per dataset")
    parser.add_argument("--profile", action="store_true", help="py-spy bertserve (SST-2 fp32, concurrency 32)")
    parser.add_argument("--bertserve-args", default="", help="extra flags for python -m service ('--max-wait-ms 5')")
    parser.add_argument("--train-scale", type=float, default=1.0, help="shrink fine-tuning subsets (smoke runs)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where results.{md,json} and plots go")
    parser.add_argument(
        "--data-dir", type=Path, default=None,
        help=f"evaluation data folder (sets ${datasets.DATA_DIR_ENV}; default: see benchmarks/datasets.py)",
    )  # fmt: skip
    parser.add_argument(
        "--merge", action="store_true", help="keep the accuracy (or throughput) part of the results already in --out"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    logging.getLogger("httpx").setLevel(logging.WARNING)
    unknown = (set(args.tasks) - set(TASKS)) | (set(args.systems) - set(SYSTEMS))
    if unknown:
        print(f"unknown tasks/systems: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.data_dir is not None:
        os.environ[datasets.DATA_DIR_ENV] = str(args.data_dir.resolve())
    try:
        log.info("evaluation data: %s", datasets.shared_data_dir())
    except datasets.DataDirNotFound as error:
        print(error, file=sys.stderr)
        return 2
    bench = Bench(args)
    # servers run in their own sessions: turn SIGTERM into KeyboardInterrupt so that they are stopped too
    signal.signal(signal.SIGTERM, interrupt)
    try:
        bench.run()
    except KeyboardInterrupt:
        bench.save()
        return 130
    print(json.dumps({"results": str(args.out / "results.md")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
