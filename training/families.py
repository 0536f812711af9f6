"""Fine-tuning the encoder families other than BERT, through transformers' own modules (AutoModelFor<Task>).

BERT checkpoints keep going through our own code (training.model). Every other family export accepts is loaded with
transformers' Auto class of the task's head and wrapped in ``FamilyModel``, which takes the inputs and gives the
outputs our modules do (named tensors in a dict), so the loop, the evaluators and the losses stay the same. A
fine-tune is saved with ``save_pretrained`` and the base's own tokenizer files, the layout model_export reads.
"""

from __future__ import annotations

import inspect
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from contract.files import read_json
from contract.tasks import task_spec
from training.checkpoint import CheckpointError, load_model, save_model
from training.model import BertPreTrainedModule

logger = logging.getLogger(__name__)

# model_type -> the attention projections LoRA adapts by default (each family's own module names).
LORA_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "value"),
    "distilbert": ("q_lin", "v_lin"),
    "roberta": ("query", "value"),
    "xlm-roberta": ("query", "value"),
    "camembert": ("query", "value"),
    "electra": ("query", "value"),
    "albert": ("query", "value"),
    "deberta-v2": ("query_proj", "value_proj"),
    "mpnet": ("q", "v"),
    "modernbert": ("Wqkv",),
}
TRANSFORMERS_FAMILIES = tuple(model_type for model_type in LORA_TARGETS if model_type != "bert")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spm.model",
    "spiece.model",
)


def model_type_of(folder: Path) -> str:
    """config.json's model_type when fine-tuning accepts it; CheckpointError naming the accepted ones otherwise."""
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a directory")
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json, so not a Hugging Face checkpoint folder")
    model_type = read_json(folder / "config.json", error=CheckpointError).get("model_type")
    if model_type not in LORA_TARGETS:
        raise CheckpointError(f"{folder}: model_type is {model_type!r}; fine-tuning accepts {', '.join(LORA_TARGETS)}")
    return str(model_type)


class FamilyModel(nn.Module):
    """A transformers task model called as our BERT modules are: input_ids, attention_mask, token_type_ids and
    targets by name, named tensor outputs in a dict. Segments reach the model only when its family has two or
    more (as the exported graph's inputs), so a tokenizer's pair type ids never index a one-row table."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        accepted = set(inspect.signature(model.forward).parameters)
        segments = int(getattr(model.config, "type_vocab_size", 0) or 0)
        self.takes_segments = "token_type_ids" in accepted and segments > 1

    @property
    def config(self) -> Any:
        return self.model.config

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        **targets: torch.Tensor | None,
    ) -> dict[str, torch.Tensor]:
        inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.takes_segments and token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        outputs = self.model(**inputs, **{key: value for key, value in targets.items() if value is not None})
        return {key: value for key, value in outputs.items() if isinstance(value, torch.Tensor)}


def load_family_model(
    folder: Path, task: str, *, random_init: bool = False, fresh_top_layers: int = 0, **config_overrides: Any
) -> FamilyModel:
    """The task's transformers head on ``folder``'s encoder (a new head: its weights drawn from the current seed)."""
    import transformers

    if fresh_top_layers:
        raise CheckpointError(f"{folder}: --fresh-top-layers applies to BERT checkpoints only")
    auto_class = getattr(transformers, task_spec(task).auto_class)
    overrides = {key: value for key, value in config_overrides.items() if key != "problem_type" or value is not None}
    try:
        config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True, **overrides)
        if random_init:
            model = auto_class.from_config(config)
        else:
            model = auto_class.from_pretrained(str(folder), config=config, local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise CheckpointError(f"{folder}: transformers cannot load it for {task}: {error}") from error
    return FamilyModel(model).eval()


def save_family_model(model: nn.Module, folder: Path, base: Path) -> None:
    """``save_pretrained`` of the transformers model, and the base checkpoint's tokenizer files beside it."""
    inner: Any = model.model if isinstance(model, FamilyModel) else model
    folder.mkdir(parents=True, exist_ok=True)
    inner.save_pretrained(str(folder))
    copy_tokenizer_files(base, folder)


def copy_tokenizer_files(base: Path, folder: Path) -> None:
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, folder / name)


def load_task_model(folder: Path, model_type: str, task: str, **options: Any) -> BertPreTrainedModule | FamilyModel:
    """The task's head on the base checkpoint: our BERT module, or a FamilyModel for the other families."""
    if model_type == "bert":
        return load_model(folder, task_spec(task).architecture, new_head=True, **options)
    return load_family_model(folder, task, **options)


def full_saver(model_type: str, base: Path, tokenizer: Tokenizer) -> Callable[[nn.Module, Path], None]:
    """How a full fine-tune is saved: our BERT's save_model, or save_pretrained and the base's tokenizer files."""

    def save(model: nn.Module, folder: Path) -> None:
        if model_type == "bert":
            save_model(model, folder, tokenizer)
        else:
            save_family_model(model, folder, base)

    return save
