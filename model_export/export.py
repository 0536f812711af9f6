"""Checkpoint folder -> validated ONNX bundle (model.onnx + tokenizer.json + bundle.json).

Steps: load the checkpoint with our own BERT (training.checkpoint.load_model, whose explicit attention fuses in
onnxruntime), export it with the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, opset 17, dynamic
batch and sequence axes), check it against torch on a fixed probe, fuse it (onnxruntime's BERT optimizer, Attention in
every layer), optionally quantise it to int8 (dynamic, per-channel) or convert it to fp16, check again, and write the
bundle into a temporary folder beside OUT_DIR that is renamed into place only when everything passed.

Notes:
- feature-extraction graphs end in one (B, H) ``sentence_embedding``: ``SentenceEmbedder`` pools the encoder's token
  states (mean or [CLS]) and L2-normalises them as the checkpoint's sentence-transformers files say (or as asked),
  so the graph answers what sentence-transformers computes and bundle.json records ``pooling`` / ``normalize``.
- The TorchScript exporter stores a tied MLM decoder weight a second time (fill-mask graphs carry the word
  embeddings twice, ~90 MB extra for BERT-base): accepted, the bundle stays one file below protobuf's 2 GiB limit.
- GPU path: ``precision="fp16"`` (CLI ``--precision fp16``) fuses the graph for GPU, converts it with the
  optimizer's ``convert_float_to_float16(keep_io_types=True)`` (int64 inputs, float32 outputs) and validates it on
  onnxruntime-gpu's CUDAExecutionProvider by top-1 agreement and cosine, not raw atol. It needs onnxruntime-gpu and
  a CUDA device at export time; it cannot be combined with int8, which is a CPU path.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import torch
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors
from torch import nn

from contract.bundle import (
    BUNDLE_FILE,
    MODEL_FILE,
    POOLINGS,
    PRECISIONS,
    QUANTIZATIONS,
    TOKENIZER_FILE,
    Bundle,
    BundleError,
    BundleSpec,
    file_sha256,
    read_bundle,
    write_spec,
)
from contract.onnx_io import ort_session
from contract.tasks import INPUT_NAMES, TASK_NAMES, TASKS, task_for_architecture
from model_export import optimize as graph_rewrites
from model_export.checkpoint_files import (
    SentencePooling,
    prepare_tokenizer,
    resolve_max_length,
    sentence_pooling,
    weights_sha256,
)
from model_export.task_eval import EvalModel, measure_int8_loss, metric_name, read_eval_rows
from model_export.validate import (
    ExportError,
    InputFeeds,
    Outputs,
    ParityError,
    SpecialIds,
    Tolerance,
    agreement_between,
    check_parity,
    default_tolerance,
    probe_batches,
    run_session,
    sequences_per_second,
    session_runner,
    text_batches,
)
from training.checkpoint import CheckpointError, load_config, load_model
from training.model import BertConfig

__all__ = ["ExportError", "ParityError", "detect_task", "export_bundle"]

logger = logging.getLogger(__name__)

SPEED_BATCH = (8, 128)
# int8 on natural text, held tighter than the random-token probe (0.95). Per-channel int8 all-MiniLM-L6-v2 keeps
# sentence-embedding cosines >= 0.99 for each probe text run alone, but 0.988 at worst in the padded probe batches:
# dynamic int8 scales activations over the whole batch, padding included. Only cosine-judged (embedding) outputs
# are held to it; the other outputs' agreement on the texts is reported.
TEXT_TOLERANCE_INT8 = Tolerance(atol=None, min_cosine=0.98)
# What the exporter, onnx, the optimizer, the quantiser and onnxruntime raise for graphs or files they cannot handle.
TOOL_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError,
    ValueError,
    OSError,
    onnx.checker.ValidationError,
    ort_errors.Fail,
    ort_errors.InvalidArgument,
    ort_errors.InvalidGraph,
    ort_errors.InvalidProtobuf,
    ort_errors.NotImplemented,
    ort_errors.RuntimeException,
)


class Progress:
    """Numbered progress lines; a tool's exception inside a step becomes a one-line ExportError naming the step."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        self.done += 1
        logger.info("[%d/%d] %s", self.done, self.total, description)
        try:
            yield
        except (ExportError, BundleError):
            raise
        except TOOL_ERRORS as error:
            detail = (str(error).strip().splitlines() or [""])[0]
            raise ExportError(f"{description} failed: {type(error).__name__}: {detail}") from error


def checkpoint_architecture(config: BertConfig) -> str:
    return config.architectures[0] if config.architectures else "BertModel"


def detect_task(architecture: str) -> str:
    task = task_for_architecture(architecture)
    if task is None:
        raise ExportError(f"cannot infer a task from architecture {architecture!r}; pass --task")
    return task


def resolve_task(requested: str, architecture: str) -> str:
    task = detect_task(architecture) if requested == "auto" else requested
    if task not in TASKS:
        raise ExportError(f"unknown task {task!r} (known: auto, {', '.join(TASK_NAMES)})")
    if architecture not in TASKS[task].sources:
        raise ExportError(f"a {architecture} checkpoint has no trained weights for task {task}")
    return task


class SentenceEmbedder(nn.Module):
    """An encoder's token states -> one (B, H) ``sentence_embedding``, as sentence-transformers computes it.

    mean: the average of the real tokens' states (padding masked out, count clamped at 1e-9 as
    sentence-transformers' Pooling does); cls: the [CLS] token's state (not the pooler output). ``normalize`` divides
    by the L2 norm (``torch.nn.functional.normalize``: clamped at 1e-12, like sentence-transformers' Normalize).
    """

    def __init__(self, encoder: nn.Module, pooling: str, normalize: bool):
        super().__init__()
        if pooling not in POOLINGS:
            raise ExportError(f"unknown pooling {pooling!r} (known: {', '.join(POOLINGS)})")
        self.encoder = encoder
        self.pooling = pooling
        self.normalize = normalize

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        encoded = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        hidden = encoded["last_hidden_state"]  # (B, T, H)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        if self.normalize:
            pooled = nn.functional.normalize(pooled, p=2.0, dim=-1)
        return {"sentence_embedding": pooled}


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


def _embedding_settings(
    checkpoint_dir: Path, task: str, pooling: str, normalize: bool | None
) -> SentencePooling | None:
    """feature-extraction's pooling and normalisation (None for other tasks, which take neither)."""
    if task != "feature-extraction":
        if pooling != "auto" or normalize is not None:
            raise ExportError(f"pooling and normalize apply to feature-extraction only, not {task}")
        return None
    embedding = sentence_pooling(checkpoint_dir, pooling, normalize)
    logger.info(
        "sentence embedding: %s pooling%s (%s)",
        embedding.pooling,
        ", L2-normalised" if embedding.normalize else "",
        "as given" if pooling != "auto" else embedding.source,
    )
    return embedding


def export_onnx(adapter: OnnxAdapter, path: Path, task: str, opset: int) -> None:
    """TorchScript export with dynamic batch and sequence axes; the model must be in eval mode."""
    dummy_ids = torch.full((2, 8), 5, dtype=torch.long)
    dummy_mask = torch.ones_like(dummy_ids)
    dummy_mask[1, 6:] = 0
    dynamic_axes = TASKS[task].dynamic_axes()
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


def torch_references(adapter: OnnxAdapter, batches: Sequence[InputFeeds]) -> list[Outputs]:
    references = []
    with torch.inference_mode():
        for batch in batches:
            values = adapter(*(torch.from_numpy(batch[name]) for name in INPUT_NAMES))
            references.append(
                {name: value.float().numpy() for name, value in zip(adapter.output_names, values, strict=True)}
            )
    return references


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


def _compare_with_fp32(
    task: str, fp32_path: Path, int8_path: Path, batches: Sequence[InputFeeds], speed_batch: InputFeeds
) -> dict[str, Any]:
    """int8 against the fp32 graph it came from: top-1 agreement / cosine on the probe and the measured speed-up."""
    sessions = {"fp32": ort_session(fp32_path), "int8": ort_session(int8_path)}
    outputs = {label: [run_session(session, batch) for batch in batches] for label, session in sessions.items()}
    rates = {
        label: sequences_per_second(session_runner(session), speed_batch, 0.3) for label, session in sessions.items()
    }
    return {
        "vs_fp32": agreement_between(task, batches, outputs["fp32"], outputs["int8"]),
        "fp32_sequences_per_second": round(rates["fp32"], 2),
        "int8_sequences_per_second": round(rates["int8"], 2),
        "speedup_vs_fp32": round(rates["int8"] / rates["fp32"], 3),
        "speed_batch": list(speed_batch["input_ids"].shape),
    }


def _check_eval_options(quantize: str, eval_data: str | Path | None, max_loss: float | None) -> None:
    if eval_data is not None and quantize != "int8":
        raise ExportError("--eval-data measures what int8 costs: it needs --quantize int8")
    if max_loss is not None and eval_data is None:
        raise ExportError("--max-loss needs --eval-data (the rows the loss is measured on)")
    if max_loss is not None and not max_loss >= 0:
        raise ExportError(f"--max-loss must be >= 0 percentage points, got {max_loss}")


def _log_int8_verdict(figures: dict[str, Any]) -> None:
    summary = (
        f"{figures['metric']} fp32 {figures['fp32']:.2f}, int8 {figures['int8']:.2f} (loss {figures['loss']:.2f} "
        f"points, {figures['changed_predictions']} of {figures['rows']} predictions changed)"
    )
    if figures["int8_accepted"]:
        logger.info("int8 kept: %s", summary)
    else:
        logger.warning(
            "int8 NOT written: %s is over --max-loss %g; the bundle keeps the fp32 graph", summary, figures["max_loss"]
        )


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
    rtol: float | None = None,
    pooling: str = "auto",
    normalize: bool | None = None,
    eval_data: str | Path | None = None,
    max_loss: float | None = None,
) -> Bundle:
    """Export a checkpoint folder into a validated bundle at out_dir; ExportError (ParityError) on any failure.

    ``pooling`` / ``normalize`` (feature-extraction only): how the graph turns token states into its
    ``sentence_embedding``; "auto" / None read the checkpoint's sentence-transformers files (modules.json), else
    mean pooling with L2 normalisation. A feature-extraction export without ``max_length`` takes
    sentence_bert_config.json's ``max_seq_length`` when the checkpoint has one, as sentence-transformers truncates.

    ``eval_data`` (with int8): labelled JSONL rows (see ``task_eval``) that the fp32 and int8 graphs are scored on
    with the task's metric; the figures go into bundle.json's ``quantization_eval``. With ``max_loss`` (percentage
    points) an int8 graph that loses more than that is not written: the bundle keeps the fp32 graph.
    """
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if quantize not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantize!r} (known: {', '.join(QUANTIZATIONS)})")
    if precision not in PRECISIONS:
        raise ExportError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if precision == "fp16" and quantize != "none":
        raise ExportError("int8 quantization is a CPU path; it cannot be combined with precision fp16")
    if precision == "fp16" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise ExportError("precision fp16 needs onnxruntime-gpu with the CUDA execution provider")
    _check_eval_options(quantize, eval_data, max_loss)
    _check_out_dir(out_dir)
    progress = Progress(
        4 + (optimize or precision == "fp16") + (quantize != "none" or precision == "fp16") + (eval_data is not None)
    )

    with progress.step(f"loading {checkpoint_dir}"):
        try:
            config = load_config(checkpoint_dir)
            architecture = checkpoint_architecture(config)
            task = resolve_task(task, architecture)
            labels_problem = TASKS[task].labels_problem(config.id2label or {})
            if labels_problem is not None:
                raise ExportError(f"{checkpoint_dir}: {labels_problem}")
            model: nn.Module = load_model(checkpoint_dir, TASKS[task].architecture)
        except CheckpointError as error:
            raise ExportError(str(error)) from error
        embedding = _embedding_settings(checkpoint_dir, task, pooling, normalize)
        if embedding is not None:
            model = SentenceEmbedder(model, embedding.pooling, embedding.normalize)
            if max_length is None and embedding.max_seq_length is not None:
                max_length = min(embedding.max_seq_length, config.max_position_embeddings)
        tokenizer, special, do_lower_case, settings = prepare_tokenizer(checkpoint_dir, task, config.vocab_size)
        max_length = resolve_max_length(max_length, settings, config)
        eval_rows = None if eval_data is None else read_eval_rows(eval_data, task, dict(config.id2label or {}))
        adapter = OnnxAdapter(model, TASKS[task].outputs).eval()
        special_ids = SpecialIds(
            *(tokenizer.token_to_id(t) for t in (special.cls_token, special.sep_token, special.pad_token))
        )
        texts = text_batches(tokenizer, max_length, special_ids.pad, config.type_vocab_size)
        batches = texts + probe_batches(config.vocab_size, special_ids, max_length, config.type_vocab_size)
        references = torch_references(adapter, batches)
    shape = (config.num_attention_heads, config.hidden_size, config.num_hidden_layers)
    outputs = TASKS[task].outputs

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would make the installed bundle unreadable to a service user
    try:
        work = staging / "work"
        work.mkdir()
        model_path, fused = work / "raw.onnx", {}
        quantization_eval: dict[str, Any] = {}
        with progress.step(f"exporting {architecture} as {task} (opset {opset})"):
            export_onnx(adapter, model_path, task, opset)
        fp32_tolerance = default_tolerance("fp32", "none", atol, rtol)
        with progress.step("checking the exported graph against torch"):
            parity = {
                "fp32": check_parity(task, model_path, batches, references, outputs, fp32_tolerance, "exported graph")
            }
        if optimize and precision == "fp32":
            with progress.step("fusing operators (onnxruntime BERT optimizer)"):
                fused_path = work / "fused.onnx"
                fused = graph_rewrites.optimize_bert(model_path, fused_path, *shape)
                model_path = fused_path
                parity["fp32"] = check_parity(
                    task, model_path, batches, references, outputs, fp32_tolerance, "fused graph"
                )
        if quantize == "int8":
            with progress.step("quantizing to int8 (dynamic, per-channel)"):
                int8_path = work / "int8.onnx"
                graph_rewrites.quantize_int8(model_path, int8_path)
                tolerance = default_tolerance("fp32", "int8", atol, rtol)
                parity["int8"] = check_parity(task, int8_path, batches, references, outputs, tolerance, "int8 graph")
                # Sentence embeddings of natural text are held tighter than the random-token probe (cosine only).
                parity["int8"]["texts"] = check_parity(
                    task, int8_path, texts, references[: len(texts)], outputs, TEXT_TOLERANCE_INT8,
                    "int8 graph on the probe texts",
                )  # fmt: skip
                speed_batch = probe_batches(
                    config.vocab_size, special_ids, max_length, config.type_vocab_size, [SPEED_BATCH], seed=1
                )[0]
                parity["int8"].update(_compare_with_fp32(task, model_path, int8_path, batches, speed_batch))
            if eval_rows is not None:
                with progress.step(f"scoring fp32 and int8 on {len(eval_rows)} eval rows ({metric_name(task)})"):
                    eval_model = EvalModel(
                        task, tokenizer, max_length, dict(config.id2label or {}), special_ids.cls, special_ids.pad,
                        special.mask_token, config.type_vocab_size > 1,
                    )  # fmt: skip
                    quantization_eval = measure_int8_loss(eval_model, model_path, int8_path, eval_rows, max_loss)
                    quantization_eval["data_sha256"] = file_sha256(Path(eval_data))  # type: ignore[arg-type]
                _log_int8_verdict(quantization_eval)
            if quantization_eval.get("int8_accepted", True):
                model_path = int8_path
            else:
                quantize = "none"
                parity.pop("int8")
        if precision == "fp16":
            with progress.step("fusing for GPU and converting to fp16"):
                fp16_path = work / "fp16.onnx"
                fused = graph_rewrites.convert_fp16(model_path, fp16_path, *shape)
                model_path = fp16_path
                tolerance = default_tolerance("fp16", "none", atol, rtol)
                parity["fp16"] = check_parity(
                    task, model_path, batches, references, outputs, tolerance, "fp16 graph", "fp16"
                )

        with progress.step(f"writing the bundle to {out_dir}"):
            shutil.move(str(model_path), staging / MODEL_FILE)
            tokenizer.save(str(staging / TOKENIZER_FILE))
            shutil.rmtree(work)
            spec = BundleSpec(
                task=task,
                architecture=architecture,
                max_length=max_length,
                id2label=dict(config.id2label or {}) if TASKS[task].needs_labels else {},
                problem_type=config.problem_type if task == "text-classification" else None,
                pooling=embedding.pooling if embedding is not None else None,
                normalize=embedding.normalize if embedding is not None else False,
                do_lower_case=do_lower_case,
                clean_up_tokenization_spaces=bool(settings.get("clean_up_tokenization_spaces", True)),
                special_tokens=special,
                outputs=list(outputs),
                precision=precision,
                quantization=quantize,
                optimized=bool(fused),
                opset=opset,
                onnxruntime_version=ort.__version__,
                source_weights_sha256=weights_sha256(checkpoint_dir),
                fused_operators=fused,
                parity=parity,
                quantization_eval=quantization_eval,
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
