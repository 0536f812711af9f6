"""Checkpoint folder -> validated ONNX bundle (model.onnx + tokenizer.json + bundle.json).

Steps: load the checkpoint with our own BERT (training.checkpoint.load_model, whose explicit attention fuses in
onnxruntime), export it with the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, opset 17, dynamic
batch and sequence axes), check it against torch on a fixed probe, fuse it (onnxruntime's BERT optimizer, Attention in
every layer), optionally quantise it to int8 (dynamic, per-channel) or convert it to fp16, check again, and write the
bundle into a temporary folder beside OUT_DIR that is renamed into place only when everything passed.

Notes:
- The TorchScript exporter stores a tied MLM decoder weight a second time (fill-mask graphs carry the word
  embeddings twice, ~90 MB extra for BERT-base): accepted, the bundle stays one file below protobuf's 2 GiB limit.
- GPU path: ``precision="fp16"`` (CLI ``--precision fp16``) fuses the graph for GPU, converts it with the
  optimizer's ``convert_float_to_float16(keep_io_types=True)`` (int64 inputs, float32 outputs) and validates it on
  onnxruntime-gpu's CUDAExecutionProvider by top-1 agreement and cosine, not raw atol. It needs onnxruntime-gpu and
  a CUDA device at export time; it cannot be combined with int8, which is a CPU path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import torch
from tokenizers import Tokenizer, normalizers
from torch import nn

from model_export import optimize as graph_rewrites
from model_export.bundle import (
    BUNDLE_FILE,
    INPUT_NAMES,
    MODEL_FILE,
    PRECISIONS,
    QUANTIZATIONS,
    TASK_OUTPUTS,
    TOKENIZER_FILE,
    Bundle,
    BundleError,
    BundleSpec,
    SpecialTokens,
    read_bundle,
    write_spec,
)
from model_export.validate import (
    Batch,
    ExportError,
    Outputs,
    ParityError,
    SpecialIds,
    agreement_between,
    check_parity,
    cpu_session,
    default_tolerance,
    is_sequence_level,
    probe_batches,
    run_session,
    sequences_per_second,
)
from training.checkpoint import CheckpointError, load_config, load_model
from training.model import TASK_ARCHITECTURES, BertConfig
from training.tokenizer import load_tokenizer

__all__ = ["ExportError", "ParityError", "detect_task", "export_bundle"]

logger = logging.getLogger(__name__)

# Checkpoint architecture -> the task it serves when --task auto.
AUTO_TASKS: dict[str, str] = {
    "BertForSequenceClassification": "text-classification",
    "BertForQuestionAnswering": "question-answering",
    "BertForTokenClassification": "token-classification",
    "BertForMaskedLM": "fill-mask",
    "BertForPreTraining": "fill-mask",
    "BertModel": "feature-extraction",
}
# Checkpoint architectures whose trained weights cover everything a task's graph computes (no random head).
TASK_SOURCES: dict[str, frozenset[str]] = {
    "text-classification": frozenset({"BertForSequenceClassification"}),
    "question-answering": frozenset({"BertForQuestionAnswering"}),
    "token-classification": frozenset({"BertForTokenClassification"}),
    "fill-mask": frozenset({"BertForMaskedLM", "BertForPreTraining"}),
    "feature-extraction": frozenset({"BertModel", "BertForPreTraining", "BertForSequenceClassification"}),
}
SPEED_BATCH = (8, 128)


def checkpoint_architecture(config: BertConfig) -> str:
    return config.architectures[0] if config.architectures else "BertModel"


def detect_task(architecture: str) -> str:
    try:
        return AUTO_TASKS[architecture]
    except KeyError:
        raise ExportError(f"cannot infer a task from architecture {architecture!r}; pass --task") from None


def resolve_task(requested: str, architecture: str) -> str:
    task = detect_task(architecture) if requested == "auto" else requested
    if task not in TASK_OUTPUTS:
        raise ExportError(f"unknown task {task!r} (known: auto, {', '.join(TASK_OUTPUTS)})")
    if architecture not in TASK_SOURCES[task]:
        raise ExportError(f"a {architecture} checkpoint has no trained weights for task {task}")
    return task


class OnnxAdapter(nn.Module):
    """Positional (input_ids, attention_mask, token_type_ids) -> the task's outputs as a tuple, for tracing."""

    def __init__(self, model: nn.Module, output_names: Sequence[str]):
        super().__init__()
        self.model = model
        self.output_names = tuple(output_names)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return tuple(outputs[name] for name in self.output_names)


def export_onnx(adapter: OnnxAdapter, path: Path, task: str, opset: int) -> None:
    """TorchScript export with dynamic batch and sequence axes; the model must be in eval mode."""
    dummy_ids = torch.full((2, 8), 5, dtype=torch.long)
    dummy_mask = torch.ones_like(dummy_ids)
    dummy_mask[1, 6:] = 0
    dynamic_axes: dict[str, dict[int, str]] = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    for name in adapter.output_names:
        dynamic_axes[name] = {0: "batch"} if is_sequence_level(task, name) else {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():
        # Tracer and deprecation warnings about the TorchScript path are expected and say nothing about the result.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(
            adapter,
            (dummy_ids, dummy_mask, torch.zeros_like(dummy_ids)),
            str(path),
            input_names=list(INPUT_NAMES),
            output_names=list(adapter.output_names),
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    # torch.onnx.export restores the adapter's own training flag (True for a fresh module) on every submodule.
    adapter.eval()
    onnx.checker.check_model(str(path))


def torch_references(adapter: OnnxAdapter, batches: Sequence[Batch]) -> list[Outputs]:
    references = []
    with torch.inference_mode():
        for batch in batches:
            values = adapter(*(torch.from_numpy(batch[name]) for name in INPUT_NAMES))
            references.append(
                {name: value.float().numpy() for name, value in zip(adapter.output_names, values, strict=True)}
            )
    return references


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ExportError(f"{path}: not valid JSON ({error})") from error
    return data if isinstance(data, dict) else {}


def _token_text(value: Any, default: str) -> str:
    if isinstance(value, dict):
        return str(value.get("content", default))
    return default if value is None else str(value)


def prepare_tokenizer(folder: Path, task: str, vocab_size: int) -> tuple[Tokenizer, SpecialTokens, bool, dict]:
    """The checkpoint's fast tokenizer (padding/truncation off), its special tokens and do_lower_case."""
    try:
        tokenizer = load_tokenizer(folder)
    except FileNotFoundError as error:
        raise ExportError(str(error)) from error
    except Exception as error:  # tokenizers raises bare Exception for malformed tokenizer.json
        raise ExportError(f"{folder}: cannot load the tokenizer ({error})") from error
    settings = {**_read_json(folder / "special_tokens_map.json"), **_read_json(folder / "tokenizer_config.json")}
    normalizer = tokenizer.normalizer
    if isinstance(normalizer, normalizers.BertNormalizer):
        # transformers rebuilds the normalizer when tokenizer_config.json disagrees with tokenizer.json; so do we.
        wanted = {
            "lowercase": settings.get("do_lower_case", normalizer.lowercase),
            "strip_accents": settings.get("strip_accents", normalizer.strip_accents),
            "handle_chinese_chars": settings.get("tokenize_chinese_chars", normalizer.handle_chinese_chars),
        }
        if any(getattr(normalizer, key) != value for key, value in wanted.items()):
            logger.info("tokenizer_config.json overrides the tokenizer.json normalizer: %s", wanted)
            tokenizer.normalizer = normalizers.BertNormalizer(clean_text=normalizer.clean_text, **wanted)
        do_lower_case = bool(wanted["lowercase"])
    else:
        do_lower_case = bool(settings.get("do_lower_case", True))
    defaults = SpecialTokens()
    special = SpecialTokens(
        **{role: _token_text(settings.get(role), getattr(defaults, role)) for role in defaults.__dataclass_fields__}
    )
    required = ["cls_token", "sep_token", "pad_token", "unk_token"] + (["mask_token"] if task == "fill-mask" else [])
    for role in required:
        if tokenizer.token_to_id(getattr(special, role)) is None:
            raise ExportError(f"{folder}: the tokenizer has no {role} {getattr(special, role)!r}")
    if tokenizer.get_vocab_size(with_added_tokens=True) > vocab_size:
        raise ExportError(
            f"{folder}: the tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, "
            f"the model's vocab_size is {vocab_size}"
        )
    return tokenizer, special, do_lower_case, settings


def resolve_max_length(requested: int | None, tokenizer_settings: dict, config: BertConfig) -> int:
    limit = config.max_position_embeddings
    if requested is not None:
        if not 2 <= requested <= limit:
            raise ExportError(f"--max-length {requested} is outside 2..{limit} (max_position_embeddings)")
        return requested
    from_tokenizer = tokenizer_settings.get("model_max_length")
    if isinstance(from_tokenizer, int) and 2 <= from_tokenizer <= limit:
        return from_tokenizer
    return min(limit, 512)


def weights_sha256(folder: Path) -> str:
    """Hash of the weight files load_model reads (model.safetensors, its shards, or pytorch_model.bin)."""
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        files = [folder / "model.safetensors"]
    elif index.is_file():
        files = [folder / name for name in sorted(set(_read_json(index).get("weight_map", {}).values()))]
    else:
        files = [folder / "pytorch_model.bin"]
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as handle:
            for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _check_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and not (out_dir.is_dir() and (not any(out_dir.iterdir()) or (out_dir / BUNDLE_FILE).exists())):
        raise ExportError(f"{out_dir}: exists and is not a bundle folder; refusing to replace it")


def _install(staging: Path, out_dir: Path) -> None:
    """Move the finished bundle into place; an existing bundle is replaced only after the new one is complete."""
    retired = None
    if out_dir.exists():
        retired = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        out_dir.rename(retired / out_dir.name)
    staging.rename(out_dir)
    if retired is not None:
        shutil.rmtree(retired)


def _speedup(fp32_path: Path, int8_path: Path, batch: Batch) -> dict[str, float]:
    rates = {}
    for label, path in (("fp32", fp32_path), ("int8", int8_path)):
        session = cpu_session(path)
        rates[label] = sequences_per_second(lambda feed, session=session: session.run(None, dict(feed)), batch, 0.3)
    return {
        "fp32_sequences_per_second": round(rates["fp32"], 2),
        "int8_sequences_per_second": round(rates["int8"], 2),
        "speedup_vs_fp32": round(rates["int8"] / rates["fp32"], 3),
        "speed_batch": list(batch["input_ids"].shape),
    }


def export_bundle(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    task: str = "auto",
    optimize: bool = True,
    quantize: str = "none",
    max_length: int | None = None,
    opset: int = 17,
    atol: float | None = None,
    precision: str = "fp32",
) -> Bundle:
    """Export a checkpoint folder into a validated bundle at out_dir; ExportError (ParityError) on any failure."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if quantize not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantize!r} (known: {', '.join(QUANTIZATIONS)})")
    if precision not in PRECISIONS:
        raise ExportError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if precision == "fp16" and quantize != "none":
        raise ExportError("int8 quantization is a CPU path; it cannot be combined with precision fp16")
    if precision == "fp16" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise ExportError("precision fp16 needs onnxruntime-gpu with the CUDA execution provider")
    _check_out_dir(out_dir)
    steps = 4 + (optimize or precision == "fp16") + (quantize != "none" or precision == "fp16")
    step = iter(range(1, steps + 1))

    logger.info("[%d/%d] loading %s", next(step), steps, checkpoint_dir)
    try:
        config = load_config(checkpoint_dir)
        architecture = checkpoint_architecture(config)
        task = resolve_task(task, architecture)
        model = load_model(checkpoint_dir, TASK_ARCHITECTURES[task])
    except CheckpointError as error:
        raise ExportError(str(error)) from error
    tokenizer, special, do_lower_case, tokenizer_settings = prepare_tokenizer(checkpoint_dir, task, config.vocab_size)
    max_length = resolve_max_length(max_length, tokenizer_settings, config)
    adapter = OnnxAdapter(model, TASK_OUTPUTS[task]).eval()
    special_ids = SpecialIds(
        cls=tokenizer.token_to_id(special.cls_token),
        sep=tokenizer.token_to_id(special.sep_token),
        pad=tokenizer.token_to_id(special.pad_token),
    )
    batches = probe_batches(config.vocab_size, special_ids, max_length, config.type_vocab_size)
    references = torch_references(adapter, batches)
    num_layers, num_heads, hidden_size = config.num_hidden_layers, config.num_attention_heads, config.hidden_size

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would make the installed bundle unreadable to a service user
    try:
        work = staging / "work"
        work.mkdir()
        raw_path = work / "raw.onnx"
        logger.info("[%d/%d] exporting %s as %s (opset %d)", next(step), steps, architecture, task, opset)
        export_onnx(adapter, raw_path, task, opset)
        logger.info("[%d/%d] checking the exported graph against torch", next(step), steps)
        fp32_tolerance = default_tolerance("fp32", "none", atol)
        parity: dict[str, Any] = {
            "fp32": check_parity(
                task, raw_path, batches, references, TASK_OUTPUTS[task], fp32_tolerance, label="exported graph"
            )
        }
        model_path, fused = raw_path, {}
        if optimize and precision == "fp32":
            logger.info("[%d/%d] fusing operators (onnxruntime BERT optimizer)", next(step), steps)
            model_path = work / "fused.onnx"
            fused = graph_rewrites.optimize_bert(raw_path, model_path, num_heads, hidden_size, num_layers)
            parity["fp32"] = check_parity(
                task, model_path, batches, references, TASK_OUTPUTS[task], fp32_tolerance, label="fused graph"
            )
        if quantize == "int8":
            logger.info("[%d/%d] quantizing to int8 (dynamic, per-channel)", next(step), steps)
            int8_path = work / "int8.onnx"
            graph_rewrites.quantize_int8(model_path, int8_path)
            tolerance = default_tolerance("fp32", "int8", atol)
            report = check_parity(task, int8_path, batches, references, TASK_OUTPUTS[task], tolerance, label="int8")
            fp32_session, int8_session = cpu_session(model_path), cpu_session(int8_path)
            report["vs_fp32"] = agreement_between(
                task,
                batches,
                [run_session(fp32_session, batch) for batch in batches],
                [run_session(int8_session, batch) for batch in batches],
            )
            speed_batch = probe_batches(
                config.vocab_size, special_ids, max_length, config.type_vocab_size, shapes=[SPEED_BATCH], seed=1
            )[0]
            report.update(_speedup(model_path, int8_path, speed_batch))
            parity["int8"] = report
            model_path = int8_path
        if precision == "fp16":
            logger.info("[%d/%d] fusing for GPU and converting to fp16", next(step), steps)
            fp16_path = work / "fp16.onnx"
            graph_rewrites.convert_fp16(raw_path, fp16_path, num_heads, hidden_size)
            tolerance = default_tolerance("fp16", "none", atol)
            parity["fp16"] = check_parity(
                task, fp16_path, batches, references, TASK_OUTPUTS[task], tolerance, precision="fp16", label="fp16"
            )
            fused = {
                name: count
                for name, count in graph_rewrites.operator_counts(fp16_path).items()
                if name in graph_rewrites.ATTENTION_OPS
            }
            model_path = fp16_path

        logger.info("[%d/%d] writing the bundle to %s", next(step), steps, out_dir)
        shutil.move(str(model_path), staging / MODEL_FILE)
        tokenizer.save(str(staging / TOKENIZER_FILE))
        shutil.rmtree(work)
        spec = BundleSpec(
            task=task,
            architecture=architecture,
            max_length=max_length,
            id2label=dict(config.id2label or {}) if task in ("text-classification", "token-classification") else {},
            problem_type=config.problem_type if task == "text-classification" else None,
            do_lower_case=do_lower_case,
            special_tokens=special,
            outputs=list(TASK_OUTPUTS[task]),
            precision=precision,
            quantization=quantize,
            optimized=bool(fused),
            opset=opset,
            onnxruntime_version=ort.__version__,
            source_weights_sha256=weights_sha256(checkpoint_dir),
            fused_operators=fused,
            parity=parity,
        )
        write_spec(staging, spec)
        read_bundle(staging)
        _install(staging, out_dir)
    except BundleError as error:
        raise ExportError(f"the written bundle does not read back: {error}") from error
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    logger.info("done: %s (%s, %s, %s)", out_dir, task, precision, quantize)
    return read_bundle(out_dir)
