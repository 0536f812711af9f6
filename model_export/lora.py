"""LoRA slots in a base bundle, and an ONNX Runtime adapter file for each LoRA fine-tune of it.

A base bundle exported with ``lora_rank`` > 0 computes, for each target projection (``lora_targets``: the
attention's query and value by default), ``x W^T + b + (x A_t) B_t``: ``A_t`` (in, rank) and ``B_t`` (rank, out) are
initializers that are also graph inputs (ONNX Runtime's overridable initializers), zero by default, so the bundle
answers as the base model. A fine-tune trains its own head, so the head's linear layers are overridable too (their
weights stored transposed, ``weight_t`` (in, out), so the exporter keeps their names). An adapter file
(``onnxruntime.AdapterFormat``) holds one fine-tune's values for those names, read from a peft LoRA folder
(``adapter_config.json`` + ``adapter_model.safetensors``): ``A^T``, ``(B * alpha / r)^T`` (zero-padded to the
bundle's rank), the head's weights; a run with it active (``RunOptions.add_active_adapter``) is that fine-tune.

bundle.json's ``lora`` says which graph names these are: ``{"rank", "slots": {module: [a, b]}, "head":
{parameter: graph name}, "shapes": {graph name: dims}}``; ``adapters/NAME.onnx_adapter`` and ``adapters/NAME.json``
(its labels) sit beside it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from contract.bundle import ADAPTER_FILE_SUFFIX, ADAPTERS_DIR, read_bundle
from model_export.validate import ExportError

DEFAULT_TARGETS = ("query", "value")
PEFT_PREFIX = "base_model.model."


class LoraSlot(nn.Module):
    """``linear`` plus a low-rank update whose factors are zero until an adapter sets them."""

    def __init__(self, linear: nn.Linear, rank: int) -> None:
        super().__init__()
        self.linear = linear
        self.lora_a = nn.Parameter(torch.zeros(linear.in_features, rank))  # A^T: (in, rank)
        self.lora_b = nn.Parameter(torch.zeros(rank, linear.out_features))  # (B * alpha / r)^T: (rank, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        return self.linear(x) + torch.matmul(torch.matmul(x, self.lora_a), self.lora_b)


class HeadSlot(nn.Module):
    """A head's linear layer as ``x weight_t + bias``: a plain MatMul on a named initializer an adapter replaces."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight_t = nn.Parameter(linear.weight.detach().t().contiguous())  # (in, out)
        self.bias = nn.Parameter(
            linear.bias.detach().clone() if linear.bias is not None else torch.zeros(linear.out_features)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.weight_t) + self.bias


def encoder_prefix(model: nn.Module) -> str:
    """The name of the model's encoder child (``bert``, ``roberta``, ...): what is not the head."""
    prefix = getattr(model, "base_model_prefix", None)
    if isinstance(prefix, str) and hasattr(model, prefix):
        return prefix
    return "bert"


def add_slots(model: nn.Module, rank: int, targets: tuple[str, ...]) -> dict[str, Any]:
    """Put a LoraSlot on every linear layer named one of ``targets`` in the encoder and a HeadSlot on every linear
    layer of the head, in place; the module paths of both (bundle.json's ``lora`` before graph names)."""
    if rank < 1:
        raise ExportError(f"lora_rank must be at least 1, not {rank}")
    encoder = encoder_prefix(model)
    slots: list[str] = []
    heads: list[str] = []
    for path, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        parent_path, _, name = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        if path.split(".")[0] == encoder:
            if name in targets:
                setattr(parent, name, LoraSlot(module, rank))
                slots.append(path)
        else:
            setattr(parent, name, HeadSlot(module))
            heads.append(path)
    if not slots:
        raise ExportError(f"no linear layer of the encoder is named {' or '.join(targets)}: nothing to adapt")
    return {"rank": rank, "slots": slots, "head": heads}


def distinct_for_export(module: nn.Module) -> None:
    """Fill every slot with distinct small random values, in place, just before the export: the TorchScript exporter
    merges initializers of equal value, and zero slots of one shape would all become one graph name
    (``mark_overridable`` writes the zeros back into the graph)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for slot in module.modules():
            if isinstance(slot, LoraSlot):
                for parameter in (slot.lora_a, slot.lora_b):
                    parameter.copy_(torch.rand(parameter.shape, generator=generator) * 1e-3 + 1e-4)


def mark_overridable(path: Path, planned: dict[str, Any]) -> dict[str, Any]:
    """Zero the slots of the graph at ``path`` and make them and the head's initializers graph inputs (ONNX
    Runtime's overridable initializers); bundle.json's ``lora``: each module's graph names and their shapes."""
    model = onnx.load(str(path))
    by_name = {tensor.name: tensor for tensor in model.graph.initializer}

    def graph_name(parameter: str) -> str:
        found = [name for name in by_name if name == parameter or name.endswith("." + parameter)]
        if len(found) != 1:
            raise ExportError(f"the exported graph has {len(found)} initializers for {parameter} (expected 1)")
        return found[0]

    slots = {module: [graph_name(f"{module}.lora_a"), graph_name(f"{module}.lora_b")] for module in planned["slots"]}
    head = {
        f"{module}.{part}": graph_name(f"{module}.{suffix}")
        for module in planned["head"]
        for part, suffix in (("weight", "weight_t"), ("bias", "bias"))
    }
    shapes = {}
    for name in [name for pair in slots.values() for name in pair]:
        tensor = by_name[name]
        tensor.CopyFrom(numpy_helper.from_array(np.zeros(list(tensor.dims), np.float32), name))
    for name in [name for pair in slots.values() for name in pair] + list(head.values()):
        tensor = by_name[name]
        model.graph.input.append(onnx.helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
        shapes[name] = list(tensor.dims)
    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)
    return {"rank": planned["rank"], "slots": slots, "head": head, "shapes": shapes}


def _peft_weights(folder: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from safetensors.numpy import load_file

    config_path, weights_path = folder / "adapter_config.json", folder / "adapter_model.safetensors"
    if not config_path.is_file() or not weights_path.is_file():
        raise ExportError(f"{folder}: not a peft LoRA folder (adapter_config.json, adapter_model.safetensors)")
    config = json.loads(config_path.read_text())
    if config.get("peft_type", "LORA") != "LORA":
        raise ExportError(f"{folder}: a {config.get('peft_type')} adapter, not LoRA")
    weights = {
        re.sub(r"\.modules_to_save(\.default)?\.", ".", key.removeprefix(PEFT_PREFIX)): value.astype(np.float32)
        for key, value in load_file(str(weights_path)).items()
    }
    return weights, config


def adapter_values(folder: Path, lora: dict[str, Any]) -> dict[str, np.ndarray]:
    """The adapter's value for each overridable graph name, from a peft LoRA folder."""
    weights, config = _peft_weights(folder)
    rank = int(config.get("r", 8))
    if rank > lora["rank"]:
        raise ExportError(f"{folder}: rank {rank} is more than the bundle's LoRA rank {lora['rank']}")
    scaling = float(config.get("lora_alpha", rank)) / (rank**0.5 if config.get("use_rslora") else rank)
    values: dict[str, np.ndarray] = {}
    used: set[str] = set()
    for module, (a_name, b_name) in lora["slots"].items():
        a_key, b_key = f"{module}.lora_A.weight", f"{module}.lora_B.weight"
        a_t = np.zeros(lora["shapes"][a_name], np.float32)
        b_t = np.zeros(lora["shapes"][b_name], np.float32)
        if a_key in weights and b_key in weights:
            a_t[:, :rank] = weights[a_key].T
            b_t[:rank, :] = weights[b_key].T * scaling
            used |= {a_key, b_key}
        values[a_name], values[b_name] = a_t, b_t
    for parameter, name in lora["head"].items():
        if parameter not in weights:
            raise ExportError(f"{folder}: no trained {parameter} (train the head: peft modules_to_save)")
        values[name] = weights[parameter].T if parameter.endswith(".weight") else weights[parameter]
        used.add(parameter)
    unused = sorted(key for key in set(weights) - used if "lora_" in key)
    if unused:
        raise ExportError(f"{folder}: LoRA weights for modules the bundle has no slot for: {', '.join(unused[:3])}")
    return values


def write_adapter(peft_folder: str | Path, bundle_folder: str | Path, name: str) -> Path:
    """``adapters/NAME.onnx_adapter`` (and ``NAME.json``: its labels) in the bundle, from a peft LoRA fine-tune."""
    import onnxruntime as ort

    peft_folder, bundle = Path(peft_folder), read_bundle(bundle_folder)
    lora = bundle.spec.lora
    if not lora:
        raise ExportError(f"{bundle.path}: not a LoRA base bundle (export it with --lora-rank)")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ExportError(f"adapter name {name!r}: letters, digits, '.', '_' and '-' only")
    values = adapter_values(peft_folder, lora)
    for graph_name, value in values.items():
        expected = tuple(lora["shapes"][graph_name])
        if value.shape != expected:
            raise ExportError(f"{peft_folder}: {graph_name} is {value.shape}, the bundle's slot {expected}")
    labels = _labels(peft_folder, bundle.spec.id2label)
    folder = bundle.path / ADAPTERS_DIR
    folder.mkdir(exist_ok=True)
    adapter = ort.AdapterFormat()
    adapter.set_adapter_version(1)
    adapter.set_model_version(1)
    adapter.set_parameters(
        {key: ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for key, v in values.items()}
    )
    path = folder / f"{name}{ADAPTER_FILE_SUFFIX}"
    adapter.export_adapter(str(path))
    (folder / f"{name}.json").write_text(json.dumps({"id2label": {str(k): v for k, v in labels.items()}}, indent=2))
    return path


def _labels(peft_folder: Path, base: dict[int, str]) -> dict[int, str]:
    """The fine-tune's labels: its config.json's id2label when it saved one beside the adapter, else the base's."""
    config = peft_folder / "config.json"
    if config.is_file():
        id2label = json.loads(config.read_text()).get("id2label") or {}
        if id2label:
            return {int(k): str(v) for k, v in id2label.items()}
    return dict(base)


def main(argv: list[str] | None = None) -> int:
    """``python -m model_export.lora PEFT_FOLDER BUNDLE --name NAME``: write one adapter into a LoRA base bundle."""
    import argparse
    import logging

    parser = argparse.ArgumentParser(prog="python -m model_export.lora", description=main.__doc__)
    parser.add_argument("peft_folder", type=Path, help="a peft LoRA fine-tune (adapter_config.json and weights)")
    parser.add_argument("bundle", type=Path, help="the LoRA base bundle (exported with --lora-rank)")
    parser.add_argument("--name", required=True, help="the adapter's name: served as BASE:NAME")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        path = write_adapter(args.peft_folder, args.bundle, args.name)
    except ExportError as error:
        logging.getLogger(__name__).error("error: %s", error)
        return 1
    logging.getLogger(__name__).info("wrote %s (%d bytes)", path, path.stat().st_size)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
