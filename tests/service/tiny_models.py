"""Tiny random BERTs for service tests: an HF checkpoint folder and a bundle folder per task.

transformers is the test-only oracle here; the bundle is made with ``model_export.export`` when it
exists, else with a plain ``torch.onnx.export`` + ``write_spec`` (the same contract).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from contract.tasks import TASKS

SERVED_TASKS = (
    "text-classification",
    "token-classification",
    "question-answering",
    "fill-mask",
    "rerank",
    "zero-shot-classification",
)
TASK_ARCHITECTURES = {task: TASKS[task].architecture for task in SERVED_TASKS}
CLASSIFICATION_LABELS = ["negative", "neutral", "positive"]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-MISC", "I-MISC"]
RERANK_LABELS = ["LABEL_0"]  # one relevance logit, as cross-encoders (ms-marco, bge-reranker) have it
NLI_LABELS = ["contradiction", "neutral", "entailment"]
MAX_LENGTH = 128

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS_TEXT = """
the a an of to in for with on at by from as and or but is are was were be been being have has had do does did not no yes
i you he she it we they me him her us them my your his its our their this that these those there here
what who whom which when where why how all any both each few more most other some such only own same so
than too very can will just should now one two three four five six seven eight nine ten first last
new old good bad great small large big long short high low early late young right left best better
movie film story actor actress plot scene music song book play game team city country world year day
time people man woman child children family friend house home school work job money life love war
john mary paul peter james george anna maria smith brown miller wilson johnson
paris london berlin rome madrid tokyo york boston chicago texas france germany italy spain japan china
england europe america africa asia river mountain street
google apple microsoft amazon united nations bank university company club party government army
monday tuesday friday january march june july october december
said says say make made go went come came see saw know knew think thought take took give gave get got
find found tell told ask asked use used want wanted look looked like liked feel felt become became
leave left call called try tried keep kept begin began seem seemed help helped show showed hear heard
run ran live lived believe bring brought happen happened write wrote sit sat stand stood lose lost
pay paid meet met include included continue set learn learned change changed lead led understand
watch watched follow followed stop stopped create created speak spoke read allow allowed add added
spend spent grow grew open opened walk walked win won offer offered remember remembered consider
appear appeared buy bought wait waited serve served die died send sent expect expected build built
stay stayed fall fell cut reach reached kill killed remain remained born capital president minister
wonderful terrible awful boring funny beautiful brilliant excellent poor worst amazing fun dull
question answer context text word sentence model test example
"""
WORDS = WORDS_TEXT.split()
PUNCTUATION = list(".,!?;:'\"()-&%$/")
CORPUS_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


def build_vocab() -> list[str]:
    candidates = list(SPECIAL_TOKENS) + PUNCTUATION + list(CORPUS_CHARS)
    candidates += ["##" + char for char in CORPUS_CHARS]
    candidates += ["##ed", "##ing", "##ly", "##er", "##est", *WORDS]
    return list(dict.fromkeys(candidates))


@dataclass(frozen=True)
class TinyModel:
    task: str
    checkpoint: Path  # HF folder: config.json, model.safetensors, tokenizer files
    bundle: Path  # model.onnx, tokenizer.json, bundle.json


def cache_key() -> str:
    digest = hashlib.sha256(Path(__file__).read_bytes())
    export_module = Path(__file__).resolve().parents[2] / "model_export" / "export.py"
    if export_module.exists():
        digest.update(export_module.read_bytes())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def build_checkpoint(task: str, folder: Path, seed: int = 0) -> None:
    import torch
    import transformers
    from transformers import BertConfig, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab()) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True, model_max_length=MAX_LENGTH)
    tokenizer.save_pretrained(folder)
    labels = {
        "text-classification": CLASSIFICATION_LABELS,
        "token-classification": NER_LABELS,
        "rerank": RERANK_LABELS,
        "zero-shot-classification": NLI_LABELS,
    }.get(task)
    label_kwargs = (
        {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}
        if labels
        else {}
    )
    config = BertConfig(
        vocab_size=len(build_vocab()),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=MAX_LENGTH,
        architectures=[TASK_ARCHITECTURES[task]],
        **label_kwargs,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, TASK_ARCHITECTURES[task])(config)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)


def export_with_torch(task: str, checkpoint: Path, folder: Path) -> None:
    """A plain legacy-exporter bundle, used until ``model_export.export.export_bundle`` exists."""
    import json

    import onnxruntime
    import torch
    import transformers

    from contract.bundle import BundleSpec, write_spec

    folder.mkdir(parents=True, exist_ok=True)
    model = getattr(transformers, TASK_ARCHITECTURES[task]).from_pretrained(checkpoint, attn_implementation="eager")
    model.eval()
    outputs = TASKS[task].outputs

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            result = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return tuple(result[name] for name in outputs)

    sample = torch.ones((2, 8), dtype=torch.long)
    token_level = {name: {0: "batch", 1: "sequence"} for name in outputs}
    if not TASKS[task].token_level:
        token_level = {name: {0: "batch"} for name in outputs}
    torch.onnx.export(
        Wrapper().eval(),
        (sample, sample, torch.zeros_like(sample)),
        str(folder / "model.onnx"),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=list(outputs),
        dynamic_axes={
            "input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "sequence"},
            "token_type_ids": {0: "batch", 1: "sequence"},
            **token_level,
        },
        opset_version=17,
        dynamo=False,
    )
    shutil.copy(checkpoint / "tokenizer.json", folder / "tokenizer.json")
    config = json.loads((checkpoint / "config.json").read_text())
    id2label = {int(k): v for k, v in config.get("id2label", {}).items()} if TASKS[task].needs_labels else {}
    spec = BundleSpec(
        task=task,
        architecture=TASK_ARCHITECTURES[task],
        max_length=MAX_LENGTH,
        id2label=id2label,
        problem_type=config.get("problem_type"),
        outputs=list(outputs),
        onnxruntime_version=onnxruntime.__version__,
    )
    write_spec(folder, spec)


def build_bundle(task: str, checkpoint: Path, folder: Path) -> None:
    try:
        from model_export.export import export_bundle
    except ImportError:
        export_with_torch(task, checkpoint, folder)
        return
    export_bundle(checkpoint, folder, task=task)


def build_tiny_models(root: Path) -> dict[str, TinyModel]:
    """Build (or reuse, when ``root`` already holds them) one tiny model per task."""
    models = {task: TinyModel(task, root / task / "checkpoint", root / task / "bundle") for task in TASK_ARCHITECTURES}
    if (root / "complete").exists():
        return models
    staging = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    for seed, task in enumerate(TASK_ARCHITECTURES):
        build_checkpoint(task, staging / task / "checkpoint", seed=seed)
        build_bundle(task, staging / task / "checkpoint", staging / task / "bundle")
    (staging / "complete").write_text("ok\n")
    try:
        staging.rename(root)
    except OSError:  # another test process finished first; its models are the same
        shutil.rmtree(staging, ignore_errors=True)
    return models
