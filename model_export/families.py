"""The encoder families export accepts, and how a checkpoint of each becomes the torch module that is traced.

BERT goes through our own model code (training.model: its explicit attention is what onnxruntime's optimizer fuses).
Every other family goes through transformers' own implementation with eager attention, an export-time dependency
only: the graph is then the family's reference maths by construction (DeBERTa's disentangled attention,
ModernBERT's rotary and local attention, RoBERTa's position offset, ALBERT's shared layers, ELECTRA's embedding
projection), and parity against that same module is checked as for BERT. Whether onnxruntime's BERT optimizer
fuses a family's attention is measured on the exported graph, not assumed (``Family.fusion`` says what to expect).
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from contract.files import read_json
from contract.tasks import INPUT_NAMES, TASKS, task_for_architecture, task_spec
from model_export.validate import ExportError
from training.checkpoint import CheckpointError, load_config, load_model

logger = logging.getLogger(__name__)

MAX_POSITIONS = 512  # what the product serves, whatever longer context a family's config allows


@dataclass(frozen=True)
class Family:
    model_type: str
    name: str  # as the README's table names it
    code: str  # "ours" (training.model) or "transformers"
    position_offset: bool  # positions are numbered from pad_token_id + 1 (RoBERTa-style)
    fusion: bool  # onnxruntime's BERT optimizer fuses attention in every layer (measured on the tiny checkpoints)


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        Family("bert", "BERT", "ours", False, True),
        Family("distilbert", "DistilBERT", "transformers", False, False),
        Family("roberta", "RoBERTa", "transformers", True, True),
        Family("xlm-roberta", "XLM-RoBERTa", "transformers", True, True),
        Family("camembert", "CamemBERT", "transformers", True, True),
        Family("electra", "ELECTRA", "transformers", False, True),
        Family("albert", "ALBERT", "transformers", False, False),
        Family("deberta-v2", "DeBERTa-v2/v3", "transformers", False, False),
        Family("mpnet", "MPNet", "transformers", True, False),
        Family("modernbert", "ModernBERT", "transformers", False, False),
    )
}
# Weights a head's graph never reads, so a checkpoint may lack them: the bare encoder's pooler (sentence embeddings
# pool token states themselves) and position-id buffers some versions save and others do not.
_UNUSED_WEIGHTS = ("pooler.", "position_ids", "embeddings.position_ids")


@dataclass(frozen=True)
class CheckpointFacts:
    """What export needs to know of a checkpoint folder, whatever its family."""

    family: Family
    architecture: str
    id2label: dict[int, str]
    problem_type: str | None
    vocab_size: int
    max_positions: int  # the longest input its position embeddings allow (<= MAX_POSITIONS)
    type_vocab_size: int  # 1 or less: one segment, and the graph takes no token_type_ids
    num_heads: int
    hidden_size: int
    num_layers: int
    inputs: tuple[str, ...]  # the graph's inputs, in INPUT_NAMES order


def supported_families() -> str:
    return ", ".join(f"{family.model_type} ({family.name})" for family in FAMILIES.values())


def family_of(folder: Path) -> Family:
    """The checkpoint's family from config.json's model_type; ExportError naming the accepted ones otherwise."""
    if not folder.is_dir():
        raise ExportError(f"{folder}: not a directory")
    if not (folder / "config.json").is_file():
        raise ExportError(f"{folder}: no config.json, so not a Hugging Face checkpoint folder")
    model_type = read_json(folder / "config.json", error=ExportError).get("model_type")
    if model_type not in FAMILIES:
        raise ExportError(
            f"{folder}: model_type is {model_type!r}; export accepts the BERT family: {supported_families()}"
        )
    return FAMILIES[model_type]


def read_facts(folder: Path) -> CheckpointFacts:
    family = family_of(folder)
    if family.code == "ours":
        try:
            config: Any = load_config(folder)
        except CheckpointError as error:
            raise ExportError(str(error)) from error
    else:
        import transformers

        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
        except (OSError, ValueError, KeyError) as error:
            raise ExportError(f"{folder}: bad config.json: {error}") from error
    architecture = (config.architectures or [_base_architecture(family)])[0]
    positions = int(getattr(config, "max_position_embeddings", MAX_POSITIONS))
    if family.position_offset:
        positions -= int(config.pad_token_id or 0) + 1
    type_vocab_size = int(getattr(config, "type_vocab_size", 0) or 0)
    # Our BERT always takes segments (as its graphs always have); another family only when it has two or more.
    inputs = INPUT_NAMES if type_vocab_size > 1 or family.code == "ours" else INPUT_NAMES[:2]
    return CheckpointFacts(
        family=family,
        architecture=architecture,
        id2label={int(key): str(value) for key, value in (config.id2label or {}).items()},
        problem_type=getattr(config, "problem_type", None),
        vocab_size=int(config.vocab_size),
        max_positions=min(positions, MAX_POSITIONS),
        type_vocab_size=type_vocab_size,
        num_heads=int(config.num_attention_heads),
        hidden_size=int(config.hidden_size),
        num_layers=int(config.num_hidden_layers),
        inputs=tuple(inputs),
    )


def _base_architecture(family: Family) -> str:
    return "BertModel" if family.code == "ours" else "Model"


def _as_bert(facts: CheckpointFacts) -> str:
    """The architecture's head as BERT names it (RobertaForMaskedLM -> BertForMaskedLM), for the task table."""
    architecture = facts.architecture
    if facts.family.code == "ours":
        return architecture
    at = architecture.find("For")
    head = architecture[at:] if at >= 0 else "Model"
    if facts.family.model_type == "electra" and head == "ForPreTraining":
        return "ElectraDiscriminator"  # the replaced-token detector: no masked-LM head, no task of its own
    return "Bert" + head


def resolve_task(requested: str, facts: CheckpointFacts) -> str:
    """The task to export: the asked one, or the one the architecture's head means under "auto"."""
    bert_architecture = _as_bert(facts)
    if requested == "auto":
        task = task_for_architecture(bert_architecture)
        if task is None:
            raise ExportError(f"cannot infer a task from architecture {facts.architecture!r}; pass --task")
    else:
        task = requested
    if task not in TASKS:
        raise ExportError(f"unknown task {task!r} (known: auto, {', '.join(TASKS)})")
    # Our own code checks the head by architecture; transformers' loader reports the missing weights itself.
    if facts.family.code == "ours" and bert_architecture not in TASKS[task].sources:
        raise ExportError(f"a {facts.architecture} checkpoint has no trained weights for task {task}")
    return task


def load_for_export(folder: Path, facts: CheckpointFacts, task: str) -> nn.Module:
    """The module whose named outputs (logits, start/end_logits, last_hidden_state) the graph computes."""
    if facts.family.code == "ours":
        try:
            return load_model(folder, TASKS[task].architecture)
        except CheckpointError as error:
            raise ExportError(str(error)) from error
    import transformers

    auto_class = getattr(transformers, task_spec(task).auto_class)
    try:
        model, loading = auto_class.from_pretrained(
            str(folder), local_files_only=True, attn_implementation="eager", output_loading_info=True
        )
    except (OSError, ValueError) as error:
        raise ExportError(f"{folder}: transformers cannot load it for {task}: {error}") from error
    missing = [key for key in loading["missing_keys"] if not any(part in key for part in _UNUSED_WEIGHTS)]
    if missing:
        raise ExportError(
            f"a {facts.architecture} checkpoint has no trained weights for task {task} "
            f"(missing: {', '.join(sorted(missing)[:5])})"
        )
    accepted = set(inspect.signature(model.forward).parameters)
    absent = [name for name in facts.inputs if name not in accepted]
    if absent:
        raise ExportError(f"{type(model).__name__} takes no {', '.join(absent)}")
    return model.eval()
