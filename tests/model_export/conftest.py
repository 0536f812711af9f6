"""Tiny random checkpoints for every task, made by our training code and by transformers, and their bundles.

transformers is only the test oracle: it writes checkpoints the way users' fine-tuning runs do (save_pretrained,
slow-tokenizer files without tokenizer.json) and gives the reference outputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from contract.tasks import TASK_NAMES
from contract.tasks import TASKS as TASK_TABLE

os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TASKS = TASK_NAMES
ORIGINS = ("ours", "transformers")
ARCHITECTURES = {name: spec.architecture for name, spec in TASK_TABLE.items()}
LABELS = {
    "text-classification": ["negative", "neutral", "positive"],
    "token-classification": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"],
    "question-answering": ["start", "end"],
    "rerank": ["LABEL_0"],  # one relevance logit
    "zero-shot-classification": ["contradiction", "neutral", "entailment"],
}
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [
    *("the", "a", "of", "to", "and", "is", "was", "it", "this", "that", "where", "who", "what", "when", "did"),
    *("movie", "film", "great", "good", "bad", "terrible", "plot", "actor", "story", "music", "play", "game"),
    *("paris", "london", "john", "mary", "go", "went", "see", "saw", "river", "bank", "city"),
]
SAMPLE_TEXTS = [
    "The movie was great.",
    "John saw Mary in Paris when the film did play.",
    "bad plot",
    "What a terrible story, the actor was good though!",
]


def vocab_tokens() -> list[str]:
    letters = list("abcdefghijklmnopqrstuvwxyz")
    tokens = SPECIAL_TOKENS + letters + list(".,!?'") + ["##" + letter for letter in letters] + WORDS
    return list(dict.fromkeys(tokens))


def write_vocab(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in vocab_tokens()), encoding="utf-8")
    return folder / "vocab.txt"


def vocab_size() -> int:
    return len(vocab_tokens())


def _config_values(task: str) -> dict:
    values = {**TINY, "vocab_size": vocab_size()}
    if task in LABELS and task != "question-answering":
        values["id2label"] = dict(enumerate(LABELS[task]))
        values["label2id"] = {label: index for index, label in enumerate(LABELS[task])}
    if task == "question-answering":
        values["num_labels"] = 2
    return values


def make_transformers_checkpoint(task: str, folder: Path, seed: int = 0) -> Path:
    """save_pretrained of a random transformers model plus slow-tokenizer files (vocab.txt, no tokenizer.json)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(**_config_values(task), attn_implementation="eager")
    model = getattr(transformers, ARCHITECTURES[task])(config).eval()
    model.save_pretrained(folder)
    transformers.BertTokenizer(str(write_vocab(folder)), do_lower_case=True).save_pretrained(folder)
    assert not (folder / "tokenizer.json").exists()
    return folder


def make_our_checkpoint(task: str, folder: Path, seed: int = 0) -> Path:
    """training.checkpoint.save_model of a random model of ours, with a tokenizer from load_tokenizer."""
    import torch

    from training.checkpoint import save_model
    from training.model import ARCHITECTURES as OUR_ARCHITECTURES
    from training.model import BertConfig
    from training.tokenizer import load_tokenizer

    torch.manual_seed(seed)
    model = OUR_ARCHITECTURES[ARCHITECTURES[task]](BertConfig(**_config_values(task))).eval()
    tokenizer = load_tokenizer(write_vocab(folder.parent / f"{folder.name}-vocab").parent)
    save_model(model, folder, tokenizer=tokenizer)
    return folder


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """checkpoint(origin, task) -> a cached checkpoint folder."""
    root = tmp_path_factory.mktemp("checkpoints")
    made: dict[tuple[str, str], Path] = {}

    def get(origin: str, task: str) -> Path:
        if (origin, task) not in made:
            maker = make_our_checkpoint if origin == "ours" else make_transformers_checkpoint
            made[origin, task] = maker(task, root / f"{origin}-{task}")
        return made[origin, task]

    return get


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory, checkpoint: Callable[[str, str], Path]) -> Callable[..., Path]:
    """bundle(origin, task, quantize="none") -> a cached bundle folder exported with task="auto" (or, for a task
    never auto-detected such as rerank, with its name)."""
    from model_export.export import export_bundle

    root = tmp_path_factory.mktemp("bundles")
    made: dict[tuple[str, str, str], Path] = {}

    def get(origin: str, task: str, quantize: str = "none") -> Path:
        key = (origin, task, quantize)
        if key not in made:
            requested = "auto" if TASK_TABLE[task].detect_from else task
            made[key] = export_bundle(
                checkpoint(origin, task), root / "-".join(key), task=requested, quantize=quantize
            ).path
        return made[key]

    return get
