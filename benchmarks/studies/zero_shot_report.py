"""``python -m benchmarks.studies.zero_shot_report``: an NLI checkpoint served as zero-shot classifier and as reranker.

The RTE fine-tune of all-MiniLM-L6-v2 (``python -m benchmarks.accuracy --task rte`` writes it to runs/accuracy/rte)
is exported twice with model_export (``--task zero-shot-classification`` and ``--task rerank``), served by one
bertserve, and scored through HTTP on real text:

- zero-shot, SST-2 dev (872 sentences), candidate labels "positive" / "negative", the pipeline's default template;
- zero-shot, topics: the first paragraphs of the SQuAD dev-subset articles whose subject is one clear topic
  (``TOPIC_ARTICLES``: the label of each article was chosen by hand from its title, before any scoring);
- rerank, RTE dev (the same weights, the head written as one logit: entailed minus not entailed,
  ``models.relevance_checkpoint``): each entailment pair's premise is the query, its own hypothesis one
  of 16 documents, the other 15 hypotheses drawn (seeded) from the rest of RTE dev (``loads.rerank_groups``, the
  benchmark's rerank load); hit@1 and MRR of the own hypothesis.

Writes ``results/zero_shot.{json,md}``; chance levels are written beside every figure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks import datasets, servers
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.loads import RERANK_DOCUMENTS, RERANK_MAX_LENGTH, RerankGroup, fitting_rte_rows, rerank_groups
from benchmarks.models import BUNDLES_DIR, RUNS_DIR, relevance_checkpoint

log = logging.getLogger("zero_shot_report")
RESULTS_DIR = Path(__file__).parents[1] / "results"  # benchmarks/results
LOGS_DIR = SCRATCH_DIR / "logs"
DEFAULT_CHECKPOINT = REPO_ROOT / "runs" / "accuracy" / "rte"
REQUEST_INPUTS = 16
CLIENT_THREADS = 2
SST2_LABELS = {"1": "positive", "0": "negative"}
TOPIC_PARAGRAPHS = 8
TOPIC_ARTICLES: dict[str, str] = {
    "Super_Bowl_50": "sports",
    "Normans": "history",
    "Martin_Luther": "history",
    "Huguenot": "history",
    "Black_Death": "history",
    "Oxygen": "science",
    "Geology": "science",
    "Ctenophora": "science",
    "Steam_engine": "technology",
    "Packet_switching": "technology",
    "Warsaw": "geography",
    "Southern_California": "geography",
    "Fresno,_California": "geography",
    "Amazon_rainforest": "geography",
    "European_Union_law": "law",
}
TOPIC_LABELS = sorted(set(TOPIC_ARTICLES.values()))


def ensure_bundle(checkpoint: Path, task: str, out: Path) -> Path:
    """Export ``checkpoint`` for ``task`` unless a bundle newer than its weights is there."""
    weights = max(path.stat().st_mtime for path in checkpoint.glob("*.safetensors"))
    spec = out / "bundle.json"
    if spec.is_file() and spec.stat().st_mtime >= weights and json.loads(spec.read_text()).get("task") == task:
        return out
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "model_export", str(checkpoint), str(out), "--task", task, "--max-length", "128"]
    log.info("exporting: %s", " ".join(command))
    subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **servers.OFFLINE_ENV}, check=True)
    return out


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> Any:
    response = client.post(path, json=body)
    response.raise_for_status()
    return response.json()


def zero_shot(base_url: str, model: str, texts: list[str], labels: list[str]) -> list[str]:
    """The top label of every text, in order (requests of REQUEST_INPUTS texts)."""

    def call(batch: list[str]) -> list[str]:
        with httpx.Client(base_url=base_url, timeout=300) as client:
            body = {"model": model, "inputs": batch, "candidate_labels": labels}
            return [result["labels"][0] for result in post(client, "/v1/zero-shot-classification", body)["results"]]

    batches = [texts[start : start + REQUEST_INPUTS] for start in range(0, len(texts), REQUEST_INPUTS)]
    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        return [label for batch in pool.map(call, batches) for label in batch]


def classification_scores(gold: list[str], predicted: list[str], labels: list[str]) -> dict[str, Any]:
    correct = sum(g == p for g, p in zip(gold, predicted, strict=True))
    majority = max(gold.count(label) for label in labels)
    return {
        "examples": len(gold),
        "accuracy": round(100.0 * correct / len(gold), 2),
        "majority_class_accuracy": round(100.0 * majority / len(gold), 2),
        "chance_accuracy": round(100.0 / len(labels), 2),
        "predicted_counts": {label: predicted.count(label) for label in labels},
        "gold_counts": {label: gold.count(label) for label in labels},
    }


def sst2_zero_shot(base_url: str, model: str, limit: int | None) -> dict[str, Any]:
    rows = datasets.read_sst2("dev")[:limit]
    labels = list(SST2_LABELS.values())
    predicted = zero_shot(base_url, model, [row.text for row in rows], labels)
    scores = classification_scores([SST2_LABELS[row.label] for row in rows], predicted, labels)
    return {"dataset": "SST-2 dev", "candidate_labels": labels, **scores}


def topic_paragraphs() -> list[tuple[str, str, str]]:
    """(article, topic, paragraph) for the first TOPIC_PARAGRAPHS paragraphs of every TOPIC_ARTICLES article."""
    articles = json.loads(datasets.squad_path().read_text(encoding="utf-8"))["data"]
    found = {article["title"]: article for article in articles}
    missing = sorted(set(TOPIC_ARTICLES) - set(found))
    if missing:
        raise RuntimeError(f"SQuAD dev-subset lacks the articles {missing}")
    return [
        (title, topic, paragraph["context"])
        for title, topic in TOPIC_ARTICLES.items()
        for paragraph in found[title]["paragraphs"][:TOPIC_PARAGRAPHS]
    ]


def topic_zero_shot(base_url: str, model: str) -> dict[str, Any]:
    items = topic_paragraphs()
    predicted = zero_shot(base_url, model, [text for _, _, text in items], TOPIC_LABELS)
    scores = classification_scores([topic for _, topic, _ in items], predicted, TOPIC_LABELS)
    per_article = {
        title: sum(p == topic for (t, topic, _), p in zip(items, predicted, strict=True) if t == title)
        for title in TOPIC_ARTICLES
    }
    return {
        "dataset": f"SQuAD v1.1 dev-subset, first {TOPIC_PARAGRAPHS} paragraphs of {len(TOPIC_ARTICLES)} articles",
        "candidate_labels": TOPIC_LABELS,
        "article_topics": TOPIC_ARTICLES,
        "correct_per_article": per_article,
        **scores,
    }


def words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def overlap_ranking(group: RerankGroup) -> list[int]:
    """The no-model baseline: documents by the number of distinct words they share with the query."""
    query = words(group.query)
    return sorted(range(len(group.documents)), key=lambda index: -len(query & words(group.documents[index])))


def ranking_scores(rankings: list[list[int]], groups: list[RerankGroup]) -> dict[str, float]:
    ranks = [ranking.index(group.relevant) + 1 for ranking, group in zip(rankings, groups, strict=True)]
    return {
        "hit_at_1": round(100.0 * sum(rank == 1 for rank in ranks) / len(ranks), 2),
        "mrr": round(sum(1.0 / rank for rank in ranks) / len(ranks), 4),
    }


def rerank_rte(base_url: str, model: str, limit: int | None) -> dict[str, Any]:
    rows = fitting_rte_rows()
    queries = [index for index, row in enumerate(rows) if row.label == "entailment"][:limit]
    groups = rerank_groups(rows, queries)
    with httpx.Client(base_url=base_url, timeout=300) as client:
        rankings = [
            [result["index"] for result in post(client, "/v1/rerank", {"model": model, "query": group.query,
                                                                       "documents": group.documents})["results"]]
            for group in groups
        ]  # fmt: skip
    chance_mrr = sum(1.0 / rank for rank in range(1, RERANK_DOCUMENTS + 1)) / RERANK_DOCUMENTS
    return {
        "dataset": f"RTE dev, the {len(queries)} entailment pairs of the {len(rows)} that fit in {RERANK_MAX_LENGTH} "
        f"tokens; query = premise, documents = its hypothesis + {RERANK_DOCUMENTS - 1} hypotheses of other pairs",
        "queries": len(queries),
        "documents_per_query": RERANK_DOCUMENTS,
        **ranking_scores(rankings, groups),
        "word_overlap_baseline": ranking_scores([overlap_ranking(group) for group in groups], groups),
        "chance_hit_at_1": round(100.0 / RERANK_DOCUMENTS, 2),
        "chance_mrr": round(chance_mrr, 4),
    }


def checkpoint_facts(checkpoint: Path) -> dict[str, Any]:
    metrics_path = checkpoint / "metrics.json"
    if not metrics_path.is_file():
        return {"checkpoint": checkpoint.name}
    metrics = json.loads(metrics_path.read_text())
    best = metrics.get("best", {})
    record = checkpoint.parent / f"{checkpoint.name}.train.json"  # benchmarks.studies.zero_shot_nli's training record
    pairs = json.loads(record.read_text()).get("pairs") if record.is_file() else None
    return {
        "checkpoint": checkpoint.name,
        "training_pairs": pairs or {"rte": 2490},
        "rte_dev_accuracy": round(100.0 * best["accuracy"], 2) if "accuracy" in best else None,
        "training_settings": {key: metrics.get("settings", {}).get(key) for key in ("epochs", "batch_size",
                                                                                    "learning_rate")},
    }  # fmt: skip


def previous_results(path: Path, checkpoint: str | None) -> dict[str, Any] | None:
    """The figures of the report being replaced, when they came from another checkpoint (or its previous one)."""
    if not path.is_file():
        return None
    old = json.loads(path.read_text(encoding="utf-8"))
    if old.get("model", {}).get("checkpoint", "rte") == checkpoint and old.get("previous"):
        return old["previous"]
    return {
        "checkpoint": old.get("model", {}).get("checkpoint", "rte"),
        "started": old.get("started"),
        "sst2_accuracy": old["sst2_zero_shot"]["accuracy"],
        "topic_accuracy": old["topic_zero_shot"]["accuracy"],
        "rerank_hit_at_1": old["rte_rerank"]["hit_at_1"],
    }


def write_markdown(results: dict[str, Any], path: Path) -> None:
    sst2, topics, rerank = results["sst2_zero_shot"], results["topic_zero_shot"], results["rte_rerank"]
    model = results["model"]
    pairs = model.get("training_pairs") or {"rte": 2490}
    if set(pairs) == {"rte"}:
        about = (
            f"Model: all-MiniLM-L6-v2 fine-tuned on RTE train (2,490 pairs) with `python -m training finetune`; its "
            f"RTE dev accuracy is {model.get('rte_dev_accuracy')} % (chance ~50): too few pairs for this encoder to "
            "learn entailment, so what follows shows the routes working end to end on real text, not a usable NLI "
            "model."
        )
    else:
        about = (
            "Model: all-MiniLM-L6-v2 fine-tuned on "
            + ", ".join(f"{count:,} {name} pairs" for name, count in pairs.items())
            + " (`python -m benchmarks.studies.zero_shot_nli`, whose docstring says how the pairs are made); its RTE "
            f"dev accuracy is {model.get('rte_dev_accuracy')} %. SST-2 sentences were in training (with sentiment "
            "hypotheses), so the SST-2 row is in-task transfer; the topic row is zero-shot: no topic label was a "
            "hypothesis in training and none of its paragraphs was a premise (later paragraphs of the same articles "
            "were, with their titles as hypotheses)."
        )
    previous = results.get("previous")
    lines = [
        "# Zero-shot classification and rerank with an NLI cross-encoder",
        "",
        f"`{results['command']}` at {results['started']}, load average {results['load_average_start']} at start, "
        f"{results['load_average_end']} at the end (accuracy does not depend on load).",
        "",
        about,
        "",
        "| evaluation | examples | metric | served fp32 | chance | majority class / word overlap |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
        f"| zero-shot, {sst2['dataset']}, labels {', '.join(sst2['candidate_labels'])} | {sst2['examples']} | "
        f"accuracy | {sst2['accuracy']} | {sst2['chance_accuracy']} | {sst2['majority_class_accuracy']} |",
        f"| zero-shot, {topics['dataset']}, labels {', '.join(topics['candidate_labels'])} | {topics['examples']} | "
        f"accuracy | {topics['accuracy']} | {topics['chance_accuracy']} | {topics['majority_class_accuracy']} |",
        f"| rerank, {rerank['dataset']} | {rerank['queries']} | hit@1 | {rerank['hit_at_1']} | "
        f"{rerank['chance_hit_at_1']} | {rerank['word_overlap_baseline']['hit_at_1']} |",
        f"| rerank (same) | {rerank['queries']} | MRR | {rerank['mrr']} | {rerank['chance_mrr']} | "
        f"{rerank['word_overlap_baseline']['mrr']} |",
        "",
        f"Predicted labels, SST-2: {sst2['predicted_counts']} (gold {sst2['gold_counts']}); "
        f"topics: {topics['predicted_counts']} (gold {topics['gold_counts']}).",
        "",
        "Rerank serves the same weights with the two-label head written as one logit, entailed minus not entailed "
        "(its sigmoid is the entailment probability; `models.relevance_checkpoint`). Word overlap: the documents "
        "ranked by the number of distinct words they share with the query (no model).",
        "",
        "Topic of each article (chosen by hand from its title before scoring): "
        + ", ".join(f"{title} {topic}" for title, topic in topics["article_topics"].items())
        + ".",
        "",
    ]
    if previous:
        lines += [
            f"Before, with the checkpoint `{previous['checkpoint']}` ({previous['started']}): SST-2 "
            f"{previous['sst2_accuracy']} %, topics {previous['topic_accuracy']} %, rerank hit@1 "
            f"{previous['rerank_hit_at_1']}.",
            "",
        ]
    path.write_text("\n".join(lines), encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.zero_shot_report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT, help="NLI (RTE) checkpoint folder")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where zero_shot.{json,md} go")
    parser.add_argument("--limit", type=int, default=None, help="only the first N SST-2 sentences / rerank queries")
    parser.add_argument("--data-dir", type=Path, default=None, help=f"evaluation data (sets ${datasets.DATA_DIR_ENV})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.data_dir is not None:
        os.environ[datasets.DATA_DIR_ENV] = str(args.data_dir.resolve())
    if not (args.checkpoint / "config.json").is_file():
        print(f"{args.checkpoint} is not a checkpoint: run python -m benchmarks.accuracy --task rte", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "command": " ".join(
            ["python -m benchmarks.studies.zero_shot_report", *(sys.argv[1:] if argv is None else argv)]
        ),
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average_start": [round(value, 1) for value in os.getloadavg()],
        "model": checkpoint_facts(args.checkpoint),
    }
    bundles = {
        "nli-zero-shot": ensure_bundle(
            args.checkpoint, "zero-shot-classification", BUNDLES_DIR / f"{args.checkpoint.name}-zero-shot-fp32"
        ),
        "nli-rerank": ensure_bundle(
            relevance_checkpoint(args.checkpoint, RUNS_DIR / "bench" / f"{args.checkpoint.name}-relevance"),
            "rerank",
            BUNDLES_DIR / f"{args.checkpoint.name}-rerank-fp32",
        ),
    }
    port = servers.free_port()
    command = [*servers.bertserve_command(bundles, port), "--log-level", "warning"]
    started = time.monotonic()
    with servers.running("bertserve-zero-shot", command, port, "/health/ready", LOGS_DIR) as server:
        results["sst2_zero_shot"] = sst2_zero_shot(server.base_url, "nli-zero-shot", args.limit)
        log.info("SST-2 zero-shot: %s", results["sst2_zero_shot"])
        results["topic_zero_shot"] = topic_zero_shot(server.base_url, "nli-zero-shot")
        log.info("topic zero-shot: %s", results["topic_zero_shot"])
        results["rte_rerank"] = rerank_rte(server.base_url, "nli-rerank", args.limit)
        log.info("RTE rerank: %s", results["rte_rerank"])
    results["wall_s"] = round(time.monotonic() - started, 1)
    results["load_average_end"] = [round(value, 1) for value in os.getloadavg()]
    args.out.mkdir(parents=True, exist_ok=True)
    results["previous"] = previous_results(args.out / "zero_shot.json", results["model"].get("checkpoint"))
    (args.out / "zero_shot.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    write_markdown(results, args.out / "zero_shot.md")
    print(json.dumps({"results": str(args.out / "zero_shot.md")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
