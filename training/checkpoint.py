"""Hugging Face checkpoint folders <-> our BERT modules.

The folder layout (config.json, model.safetensors, tokenizer files) is the contract with model_export and with
users' own checkpoints, so loading accepts what transformers writes (with or without the `bert.` prefix, safetensors
or pytorch_model.bin, sharded or not) and saving writes what transformers loads with no missing or unexpected keys.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch import nn

from contract.files import read_json
from training.model import ARCHITECTURES, BertConfig, BertPreTrainedModule
from training.tokenizer import save_tokenizer

logger = logging.getLogger(__name__)

ENCODER_PREFIXES = ("embeddings.", "encoder.", "pooler.")
# Parameters of every BERT head we know. A checkpoint trained for another head carries some of these; they are
# dropped (as transformers does) instead of being treated as a checkpoint that does not fit the model.
KNOWN_HEAD_KEYS = frozenset(
    [f"cls.predictions.transform.{name}.{kind}" for name in ("dense", "LayerNorm") for kind in ("weight", "bias")]
    + ["cls.predictions.bias", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"]
    + [f"{head}.{kind}" for head in ("cls.seq_relationship", "classifier", "qa_outputs") for kind in ("weight", "bias")]
)
# The MLM decoder shares its weight with the word embeddings and its bias with cls.predictions.bias; transformers
# stores neither copy and re-ties them on load.
TIED_KEYS = frozenset(["cls.predictions.decoder.weight", "cls.predictions.decoder.bias"])
LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}
BUFFER_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")


class CheckpointError(ValueError):
    """A folder or file that is not a BERT checkpoint this code can load; the message names it and the problem."""


def load_config(folder: str | Path) -> BertConfig:
    folder = Path(folder)
    config_file = folder / "config.json"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a directory")
    if not config_file.is_file():
        raise CheckpointError(f"{folder}: no config.json, so not a Hugging Face checkpoint folder")
    values = read_json(config_file, error=CheckpointError)
    if values.get("model_type") != "bert":
        raise CheckpointError(
            f"{folder}: model_type is {values.get('model_type')!r}; this code (training.model) is BERT's alone, so "
            "fine-tuning starts from BERT checkpoints. Other BERT-family checkpoints (DistilBERT, RoBERTa, ...) "
            "export and serve as they are (python -m model_export): fine-tune them with transformers' Trainer, "
            "then export the result"
        )
    position_embedding_type = values.get("position_embedding_type", "absolute")
    if position_embedding_type != "absolute":
        raise CheckpointError(f"{folder}: position_embedding_type {position_embedding_type!r} is not supported")
    if values.get("is_decoder") or values.get("add_cross_attention"):
        raise CheckpointError(f"{folder}: decoder / cross-attention BERT checkpoints are not supported")
    try:
        return BertConfig.from_dict(values)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{folder}: bad config.json: {error}") from error


def _read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    safetensors_file = folder / "model.safetensors"
    index_file = folder / "model.safetensors.index.json"
    bin_file = folder / "pytorch_model.bin"
    try:
        if safetensors_file.is_file():
            return load_file(str(safetensors_file))
        if index_file.is_file():
            shards = sorted(set(read_json(index_file, error=CheckpointError)["weight_map"].values()))
            state: dict[str, torch.Tensor] = {}
            for shard in shards:
                state.update(load_file(str(folder / shard)))
            return state
        if bin_file.is_file():
            loaded = torch.load(bin_file, map_location="cpu", weights_only=True)
            if not isinstance(loaded, dict):
                raise CheckpointError(f"{bin_file}: expected a state dict, got {type(loaded).__name__}")
            return loaded
    except CheckpointError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as error:
        raise CheckpointError(f"{folder}: cannot read the weights ({error})") from error
    raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin")


def _normalise_key(key: str, with_bert_prefix: bool) -> str:
    for legacy, current in LEGACY_SUFFIXES.items():
        if key.endswith(legacy) and "LayerNorm" in key:
            key = key[: -len(legacy)] + current
    if with_bert_prefix and key.startswith(ENCODER_PREFIXES):
        return "bert." + key
    if not with_bert_prefix and key.startswith("bert."):
        return key[len("bert.") :]
    return key


def _summarise(keys: set[str], limit: int = 5) -> str:
    ordered = sorted(keys)
    more = f" and {len(ordered) - limit} more" if len(ordered) > limit else ""
    return ", ".join(ordered[:limit]) + more


def _fit_state_dict(
    model: BertPreTrainedModule, state: dict[str, torch.Tensor], folder: Path, new_head: bool = False
) -> dict[str, torch.Tensor]:
    """Rename the checkpoint's keys to the model's, drop other heads' weights, and refuse anything that does not fit.

    Weights the checkpoint lacks (a head, the pooler) keep their random initialisation: with ``new_head`` (fine-tuning
    puts a task head on a base checkpoint) that is expected and said so; otherwise it is a warning.
    """
    with_bert_prefix = hasattr(model, "bert")
    expected = model.state_dict()
    fitted: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if key.endswith(BUFFER_SUFFIXES):
            continue
        fitted[_normalise_key(key, with_bert_prefix)] = tensor
    for key in TIED_KEYS:
        fitted.pop(key, None)

    unexpected = set(fitted) - set(expected)
    # Heads without a pooler (MLM, QA, token classification) leave a pretrained pooler unused, as in transformers.
    other_heads = {key for key in unexpected if key in KNOWN_HEAD_KEYS or key.startswith(("pooler.", "bert.pooler."))}
    if unexpected - other_heads:
        raise CheckpointError(
            f"{folder}: unexpected weights for {type(model).__name__}: {_summarise(unexpected - other_heads)}"
        )
    if other_heads:
        logger.info("%s: ignoring weights %s has no use for: %s", folder, type(model).__name__, _summarise(other_heads))
    for key in other_heads:
        del fitted[key]

    mismatched = {
        f"{key} {tuple(tensor.shape)} vs {tuple(expected[key].shape)}"
        for key, tensor in fitted.items()
        if tensor.shape != expected[key].shape
    }
    if mismatched:
        raise CheckpointError(f"{folder}: weight shapes do not fit the config: {_summarise(mismatched)}")

    missing = set(expected) - set(fitted) - TIED_KEYS
    encoder_prefix = "bert." if with_bert_prefix else ""
    missing_encoder = {
        key for key in missing if key.startswith(encoder_prefix) and not key.startswith(encoder_prefix + "pooler.")
    }
    if missing_encoder:
        raise CheckpointError(f"{folder}: the checkpoint lacks encoder weights: {_summarise(missing_encoder)}")
    if missing and new_head:
        logger.info(
            "%s: %s weights not in the checkpoint, newly initialised: %s (as expected: fine-tuning puts a new head "
            "on the base checkpoint and trains it)",
            folder, type(model).__name__, _summarise(missing),
        )  # fmt: skip
    elif missing:
        logger.warning(
            "%s: %s weights not in the checkpoint, newly initialised: %s",
            folder,
            type(model).__name__,
            _summarise(missing),
        )
    return fitted


def load_model(
    folder: str | Path,
    architecture: str | None = None,
    *,
    random_init: bool = False,
    fresh_top_layers: int = 0,
    new_head: bool = False,
    **config_overrides: Any,
) -> BertPreTrainedModule:
    """Build ARCHITECTURES[architecture or the config's first architecture or BertModel] and load its weights.

    config_overrides (e.g. id2label, problem_type, hidden_dropout_prob) replace config.json values, which lets
    fine-tuning put a new head on a headless encoder. ``random_init`` keeps the folder's configuration but not its
    weights: the from-scratch baseline that shows what pre-training gave. ``fresh_top_layers`` leaves the top N
    encoder layers and the pooler at their new random weights (Zhang et al. 2021, "Revisiting few-sample BERT
    fine-tuning": the layers nearest the pre-training heads fit those heads, not the task); on random weights it
    changes nothing. ``new_head``: weights the checkpoint lacks are a head about to be trained, so their random
    start is an info line saying it is expected, not a warning. Returns the model in eval mode.
    """
    folder = Path(folder)
    config = load_config(folder)
    if config_overrides:
        try:
            config = config.with_overrides(**config_overrides)
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{folder}: config overrides do not apply: {error}") from error
    name = architecture or (config.architectures[0] if config.architectures else "BertModel")
    if name not in ARCHITECTURES:
        raise CheckpointError(f"{folder}: architecture {name!r} is not supported; known: {sorted(ARCHITECTURES)}")
    config = config.with_overrides(architectures=[name])
    try:
        model = ARCHITECTURES[name](config)
    except ValueError as error:
        raise CheckpointError(f"{folder}: cannot build {name}: {error}") from error
    layers = config.num_hidden_layers
    if not 0 <= fresh_top_layers <= layers:
        raise CheckpointError(f"{folder}: cannot leave {fresh_top_layers} of its {layers} layers fresh")
    if random_init:
        return model.eval()
    state = _fit_state_dict(model, _read_state_dict(folder), folder, new_head)
    if fresh_top_layers:
        state = _without_top_layers(state, layers, fresh_top_layers, folder)
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    return model.eval()


def _without_top_layers(
    state: dict[str, torch.Tensor], layers: int, fresh: int, folder: Path
) -> dict[str, torch.Tensor]:
    prefixes = tuple(
        f"{bert}{part}" for bert in ("", "bert.")
        for part in ("pooler.", *(f"encoder.layer.{index}." for index in range(layers - fresh, layers)))
    )  # fmt: skip
    kept = {key: tensor for key, tensor in state.items() if not key.startswith(prefixes)}
    logger.info("%s: the top %d layers and the pooler start from random weights", folder, fresh)
    return kept


def save_model(
    model: nn.Module, folder: str | Path, tokenizer: Tokenizer | None = None, do_lower_case: bool = True
) -> None:
    """Write config.json, model.safetensors and (given a tokenizer) the tokenizer files into folder."""
    folder = Path(folder)
    name = type(model).__name__
    if not isinstance(model, BertPreTrainedModule) or name not in ARCHITECTURES:
        raise ValueError(f"save_model: {name} is not one of {sorted(ARCHITECTURES)}")
    config = model.config.with_overrides(architectures=[name])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    state = {
        key: tensor.detach().cpu().contiguous() for key, tensor in model.state_dict().items() if key not in TIED_KEYS
    }
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        save_tokenizer(tokenizer, folder, do_lower_case=do_lower_case, model_max_length=config.max_position_embeddings)
