"""LoRA fine-tuning with peft: low-rank adapters on the encoder's attention projections and a fully trained head.

Only the adapters and the head (peft ``modules_to_save``: every child of the task model beside its encoder) train;
the base weights stay frozen. A run saves peft's adapter folder (adapter_config.json, adapter_model.safetensors)
with config.json (the head's id2label) and the tokenizer files beside it: ``python -m model_export.lora`` turns it
into an adapter of a LoRA base bundle. With ``merge`` the adapters are folded into a full checkpoint instead, saved
in the folder as a plain fine-tune, and the adapter folder goes to its ``adapter/`` subfolder.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from training.checkpoint import CheckpointError
from training.families import LORA_TARGETS, FamilyModel, copy_tokenizer_files

logger = logging.getLogger(__name__)

ADAPTER_SUBFOLDER = "adapter"


@dataclass(frozen=True)
class LoraOptions:
    rank: int = 0  # 0: full fine-tuning
    alpha: int | None = None  # None: twice the rank
    targets: tuple[str, ...] | None = None  # None: the family's query and value projections (LORA_TARGETS)
    dropout: float = 0.0
    merge: bool = False


def _encoder_name(model: nn.Module) -> str:
    prefix = getattr(model, "base_model_prefix", None)
    if isinstance(prefix, str) and hasattr(model, prefix):
        return prefix
    return "bert"


def head_modules(model: nn.Module) -> list[str]:
    """The task model's children beside its encoder that hold weights: the head peft trains in full."""
    encoder = _encoder_name(model)
    return [name for name, child in model.named_children() if name != encoder and any(True for _ in child.parameters())]


def apply_lora(model: nn.Module, options: LoraOptions, model_type: str) -> nn.Module:
    """``model`` with peft LoRA layers on ``options.targets`` (or the family's defaults) and its head trainable; a
    FamilyModel keeps its wrapper around the peft model. Every other weight has requires_grad off."""
    import peft

    if options.rank < 1:
        raise CheckpointError(f"--lora-rank must be at least 1 (0: full fine-tuning), not {options.rank}")
    inner = model.model if isinstance(model, FamilyModel) else model
    targets = list(options.targets or LORA_TARGETS[model_type])
    names = {name.rpartition(".")[2] for name, module in inner.named_modules() if isinstance(module, nn.Linear)}
    absent = [target for target in targets if target not in names]
    if absent:
        raise CheckpointError(
            f"--lora-targets {', '.join(absent)}: no linear layer of this {model_type} model has that name "
            f"(its linear layers: {', '.join(sorted(names))})"
        )
    config = peft.LoraConfig(
        r=options.rank,
        lora_alpha=options.alpha if options.alpha is not None else 2 * options.rank,
        lora_dropout=options.dropout,
        target_modules=targets,
        modules_to_save=head_modules(inner),
    )
    tuned = peft.get_peft_model(inner, config)
    trainable = sum(p.numel() for p in tuned.parameters() if p.requires_grad)
    total = sum(p.numel() for p in tuned.parameters())
    logger.info("LoRA rank %d on %s: %s of %s parameters train", options.rank, ",".join(targets), f"{trainable:,}",
                f"{total:,}")  # fmt: skip
    if isinstance(model, FamilyModel):
        model.model = tuned
        return model
    return tuned


def _peft_model(model: nn.Module) -> Any:
    return model.model if isinstance(model, FamilyModel) else model


def save_lora(
    model: nn.Module, folder: Path, options: LoraOptions, save_full: Callable[[nn.Module, Path], None], base: Path
) -> None:
    """The adapter folder (with config.json and tokenizer files) in ``folder``, or with ``merge`` the merged full
    checkpoint there (``save_full``) and the adapter folder in ``folder/adapter``."""
    tuned = _peft_model(model)
    adapter_folder = folder / ADAPTER_SUBFOLDER if options.merge else folder
    adapter_folder.mkdir(parents=True, exist_ok=True)
    tuned.save_pretrained(str(adapter_folder))
    _write_config(tuned.get_base_model(), adapter_folder)
    copy_tokenizer_files(base, adapter_folder)
    if options.merge:
        merged = copy.deepcopy(tuned).merge_and_unload()
        save_full(FamilyModel(merged) if isinstance(model, FamilyModel) else merged, folder)


def _write_config(base_model: nn.Module, folder: Path) -> None:
    config: Any = base_model.config
    if hasattr(config, "save_pretrained"):
        config.save_pretrained(str(folder))
        return
    values = config.with_overrides(architectures=[type(base_model).__name__]).to_dict()
    (folder / "config.json").write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
