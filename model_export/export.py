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
- Memory: the export holds at most ~3.5x the fp32 weights (BERT-base and BERT-large, fp32 and int8; ~9x before).
  The torch model is released once its reference outputs are computed and its graph exported; from then on the
  graph goes from step to step with its weights in external data (``raw.onnx`` + ``raw.onnx.data``, ...), each step
  reading them from disk a tensor at a time where the tools allow it (``torch_export``, ``optimize``,
  ``onnx_files``), and the bundle's one ``model.onnx`` is streamed from them, byte for byte the file the in-memory
  tools wrote. Every step hands the memory it freed back to the system; the last log line gives the peak RSS.
- GPU path: ``precision="fp16"`` (CLI ``--precision fp16``) fuses the graph for GPU, converts it with the
  optimizer's ``convert_float_to_float16(keep_io_types=True)`` (int64 inputs, float32 outputs) and validates it on
  onnxruntime-gpu's CUDAExecutionProvider by top-1 agreement and cosine, not raw atol. It needs onnxruntime-gpu and
  a CUDA device at export time; it cannot be combined with int8, which is a CPU path.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
from torch import nn

from contract.bundle import (
    BUNDLE_FILE,
    MODEL_FILE,
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
from contract.tasks import TASKS
from model_export import optimize as graph_rewrites
from model_export import validate
from model_export.calibration import CALIBRATION_DESCRIPTION, WindowReader, quantize_int8_static
from model_export.checkpoint_files import (
    SentencePooling,
    prepare_tokenizer,
    resolve_max_length,
    sentence_pooling,
    sentence_prompts,
    weights_sha256,
)
from model_export.embedding_ranges import embedding_ranges, read_texts
from model_export.families import Family, load_for_export, read_facts, resolve_task
from model_export.int8_checks import (
    SPEED_BATCH,
    TEXT_TOLERANCE_INT8,
    check_eval_options,
    compare_with_fp32,
    explain_int8_mismatch,
    log_int8_verdict,
    served_precision,
)
from model_export.lora import add_slots, distinct_for_export, mark_overridable
from model_export.memory import collecting_new_objects_only, describe_peak, release_memory
from model_export.onnx_files import external_data_file, save_single_file
from model_export.options import DEFAULTS
from model_export.progress import Progress
from model_export.task_eval import EvalModel, measure_int8_loss, metric_name, read_eval_rows, row_windows
from model_export.torch_export import (
    OnnxAdapter,
    SentenceEmbedder,
    export_onnx,
    fp32_weights_bytes,
    torch_references,
)
from model_export.validate import (
    ExportError,
    ParityError,
    SpecialIds,
    ValueMismatch,
    default_tolerance,
    probe_batches,
    text_batches,
)

__all__ = ["ExportError", "OnnxAdapter", "ParityError", "export_bundle", "export_onnx"]

logger = logging.getLogger(__name__)

INT8 = "int8 graph"


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


def check_parity(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """validate.check_parity, then its session's memory back to the system before the next step allocates."""
    try:
        return validate.check_parity(*args, **kwargs)
    finally:
        release_memory()


def _install_graph(model_path: Path, target: Path) -> None:
    """The graph as the bundle's single file: moved when it is one, streamed into one when it has external data."""
    if not external_data_file(model_path).exists():
        shutil.move(str(model_path), target)
        return
    save_single_file(onnx.load(str(model_path), load_external_data=False), target, base_dir=model_path.parent)


def _fuse(source: Path, target: Path, shape: tuple[int, int, int], family: Family) -> dict[str, int]:
    """Fused operator counts ({} when the graph stays unfused). Our BERT must fuse attention in every layer (its
    attention is written for the optimizer); another family keeps its unfused graph when attention does not fuse."""
    try:
        return graph_rewrites.optimize_bert(source, target, *shape)
    except graph_rewrites.AttentionNotFused as error:
        if family.code == "ours":
            raise
        logger.info("%s: %s; the bundle keeps the unfused graph", family.name, error)
        return {}


def calibrate_int8(
    model: EvalModel, source: Path, target: Path, rows: list[Any], keep_fp32: dict[str, str], reduce_range: bool
) -> dict[str, Any]:
    """Static int8 of ``source`` calibrated on the windows of ``rows``; what bundle.json records of it."""
    windows = row_windows(model, rows)
    inputs = [node.name for node in onnx.load(str(source), load_external_data=False).graph.input]
    reader = WindowReader(windows, model.pad_token_id, model.use_token_types, inputs)
    quantize_int8_static(source, target, reader, list(keep_fp32), reduce_range=reduce_range)
    return {
        "method": "static QDQ (MatMul), " + CALIBRATION_DESCRIPTION,
        "rows": len(rows),
        "windows": len(windows),
    }


@collecting_new_objects_only()
def export_bundle(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    task: str = DEFAULTS.task,
    optimize: bool = DEFAULTS.optimize,
    quantize: str = DEFAULTS.quantize,
    max_length: int | None = DEFAULTS.max_length,
    opset: int = DEFAULTS.opset,
    atol: float | None = DEFAULTS.atol,
    precision: str = DEFAULTS.precision,
    rtol: float | None = DEFAULTS.rtol,
    pooling: str = DEFAULTS.pooling,
    normalize: bool | None = DEFAULTS.normalize,
    eval_data: str | Path | None = DEFAULTS.eval_data,
    max_loss: float | None = DEFAULTS.max_loss,
    int8_fp32_ffn_layers: int = DEFAULTS.int8_fp32_ffn_layers,
    int8_fp32_attention: bool = DEFAULTS.int8_fp32_attention,
    int8_reduce_range: bool = DEFAULTS.int8_reduce_range,
    token_embeddings: bool = DEFAULTS.token_embeddings,
    request_defaults: dict[str, Any] | None = DEFAULTS.request_defaults,
    int8_calibration: str | Path | None = DEFAULTS.int8_calibration,
    embedding_calibration: str | Path | None = DEFAULTS.embedding_calibration,
    lora_rank: int = DEFAULTS.lora_rank,
    lora_targets: str = DEFAULTS.lora_targets,
) -> Bundle:
    """Export a checkpoint folder into a validated bundle at out_dir; ExportError (ParityError) on any failure.

    Every parameter after out_dir is an ``ExportOptions`` field (model_export/options.py: default and help).

    ``pooling`` / ``normalize`` (feature-extraction only): how the graph turns token states into its
    ``sentence_embedding``; "auto" / None read the checkpoint's sentence-transformers files (modules.json), else
    mean pooling with L2 normalisation. A feature-extraction export without ``max_length`` takes
    sentence_bert_config.json's ``max_seq_length`` when the checkpoint has one, as sentence-transformers truncates.

    ``eval_data`` (with int8): labelled JSONL rows (see ``task_eval``) that the fp32 and int8 graphs are scored on
    with the task's metric; the figures go into bundle.json's ``quantization_eval``. With ``max_loss`` (percentage
    points) an int8 graph that loses more than that is not written: the bundle keeps the fp32 graph.
    ``int8_fp32_ffn_layers``: the first N encoder layers' feed-forward output projections stay fp32 in the int8
    graph, and ``int8_fp32_attention`` the fused attention (each node recorded with its reason in the int8 parity
    report, ``kept_fp32``). ``token_embeddings`` (feature-extraction only): the graph also gives the encoder's token
    states, ``token_embeddings`` (B, T, H), which TEI's ``/embed_all`` answers. ``request_defaults``: parameters
    the served model answers with when a request leaves them out (``{"aggregation_strategy": "first"}``).
    ``int8_calibration`` (with int8): JSONL rows in ``eval_data``'s format (labels unused) whose windows calibrate
    static int8 (``calibration``: QDQ MatMuls, fixed activation scales) instead of dynamic int8.
    ``embedding_calibration`` (feature-extraction): a file of texts whose embeddings' ranges go into bundle.json.
    """
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if quantize not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantize!r} (known: {', '.join(QUANTIZATIONS)})")
    if precision not in PRECISIONS:
        raise ExportError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
    if (int8_fp32_ffn_layers or int8_fp32_attention or int8_reduce_range) and quantize != "int8":
        raise ExportError("int8_fp32_ffn_layers, int8_fp32_attention, int8_reduce_range apply to --quantize int8 only")
    if int8_calibration is not None and quantize != "int8":
        raise ExportError("int8_calibration applies to --quantize int8 only")
    if precision == "fp16" and quantize != "none":
        raise ExportError("int8 quantization is a CPU path; it cannot be combined with precision fp16")
    if precision == "fp16" and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise ExportError("precision fp16 needs onnxruntime-gpu with the CUDA execution provider")
    if lora_rank and (quantize != "none" or precision != "fp32"):
        raise ExportError("a LoRA base bundle (lora_rank) is fp32 and not quantized")
    optimize = optimize and not lora_rank  # the fusion patterns do not know the LoRA slots' extra MatMuls
    check_eval_options(quantize, eval_data, max_loss)
    _check_out_dir(out_dir)
    progress = Progress(
        4 + (optimize or precision == "fp16") + (quantize != "none" or precision == "fp16") + (eval_data is not None)
    )

    with progress.step(f"loading {checkpoint_dir}"):
        facts = read_facts(checkpoint_dir)
        architecture = facts.architecture
        task = resolve_task(task, facts)
        labels_problem = TASKS[task].labels_problem(facts.id2label)
        if labels_problem is not None:
            raise ExportError(f"{checkpoint_dir}: {labels_problem}")
        defaults_problem = TASKS[task].request_defaults_problem(request_defaults or {})
        if defaults_problem is not None:
            raise ExportError(defaults_problem)
        model: nn.Module = load_for_export(checkpoint_dir, facts, task)
        lora_plan = add_slots(model, lora_rank, tuple(lora_targets.split(","))) if lora_rank else None
        embedding = _embedding_settings(checkpoint_dir, task, pooling, normalize)
        prompts, default_prompt_name = sentence_prompts(checkpoint_dir) if embedding is not None else ({}, None)
        if embedding is not None:
            model = SentenceEmbedder(model, embedding.pooling, embedding.normalize)
            if max_length is None and embedding.max_seq_length is not None:
                max_length = min(embedding.max_seq_length, facts.max_positions)
        tokenizer, special, do_lower_case, settings = prepare_tokenizer(checkpoint_dir, task, facts.vocab_size)
        max_length = resolve_max_length(max_length, settings, facts.max_positions)
        eval_rows = None if eval_data is None else read_eval_rows(eval_data, task, facts.id2label)
        calibration_rows = None if int8_calibration is None else read_eval_rows(int8_calibration, task, facts.id2label)
        for name, given in (("token_embeddings", token_embeddings), ("embedding_calibration", embedding_calibration)):
            if given and task != "feature-extraction":
                raise ExportError(f"{name} apply to feature-extraction only, not {task}")
        calibration_texts = None if embedding_calibration is None else read_texts(embedding_calibration)
        outputs = TASKS[task].outputs + (("token_embeddings",) if token_embeddings else ())
        adapter = OnnxAdapter(model, outputs, facts.inputs).eval()
        del model  # the adapter holds the only reference, dropped once the graph is exported
        weights_bytes = fp32_weights_bytes(adapter)
        special_ids = SpecialIds(
            *(tokenizer.token_to_id(t) for t in (special.cls_token, special.sep_token, special.pad_token))
        )
        texts = text_batches(tokenizer, max_length, special_ids.pad, facts.type_vocab_size)
        batches = texts + probe_batches(facts.vocab_size, special_ids, max_length, facts.type_vocab_size)
        references = torch_references(adapter, batches)
    shape = (facts.num_heads, facts.hidden_size, facts.num_layers)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would make the installed bundle unreadable to a service user
    try:
        work = staging / "work"
        work.mkdir()
        model_path, fused = work / "raw.onnx", {}
        quantization_eval: dict[str, Any] = {}
        with progress.step(f"exporting {architecture} as {task} (opset {opset})"):
            if lora_plan is not None:
                distinct_for_export(adapter)
            export_onnx(adapter, model_path, task, opset)
            lora = mark_overridable(model_path, lora_plan) if lora_plan is not None else {}
            # Everything from here on is ONNX: the torch model (and the exporter's leftovers) go before it starts.
            del adapter
            release_memory()
        fp32_tolerance = default_tolerance("fp32", "none", atol, rtol)
        with progress.step("checking the exported graph against torch"):
            parity = {
                "fp32": check_parity(task, model_path, batches, references, outputs, fp32_tolerance, "exported graph")
            }
        if optimize and precision == "fp32":
            with progress.step("fusing operators (onnxruntime BERT optimizer)"):
                fused_path = work / "fused.onnx"
                fused = _fuse(model_path, fused_path, shape, facts.family)
                release_memory()
                if fused:
                    model_path = fused_path
                    parity["fp32"] = check_parity(
                        task, model_path, batches, references, outputs, fp32_tolerance, "fused graph"
                    )
        eval_model = EvalModel(
            task, tokenizer, max_length, facts.id2label, special_ids.cls, special_ids.pad, special.mask_token,
            facts.type_vocab_size > 1,
        )  # fmt: skip
        if quantize == "int8":
            how = "dynamic" if calibration_rows is None else f"static QDQ, calibrated on {len(calibration_rows)} rows"
            with progress.step(f"quantizing to int8 ({how}, per-channel)"):
                int8_path = work / "int8.onnx"
                keep_fp32 = graph_rewrites.kept_fp32_nodes(model_path, int8_fp32_ffn_layers, int8_fp32_attention)
                calibration: dict[str, Any] = {}
                if calibration_rows is None:
                    graph_rewrites.quantize_int8(model_path, int8_path, list(keep_fp32), int8_reduce_range)
                else:
                    calibration = calibrate_int8(
                        eval_model, model_path, int8_path, calibration_rows, keep_fp32, int8_reduce_range
                    )
                    calibration["data_sha256"] = file_sha256(Path(int8_calibration))  # type: ignore[arg-type]
                release_memory()
                tolerance = default_tolerance("fp32", "int8", atol, rtol)
                try:
                    parity["int8"] = check_parity(task, int8_path, batches, references, outputs, tolerance, INT8)
                except ValueMismatch as error:
                    raise explain_int8_mismatch(error, int8_reduce_range) from error
                parity["int8"]["reduce_range"] = int8_reduce_range
                if keep_fp32:
                    parity["int8"]["kept_fp32"] = keep_fp32
                if calibration:
                    parity["int8"]["calibration"] = calibration
                # Sentence embeddings of natural text are held tighter than the random-token probe (cosine only).
                parity["int8"]["texts"] = check_parity(
                    task, int8_path, texts, references[: len(texts)], outputs, TEXT_TOLERANCE_INT8,
                    "int8 graph on the probe texts",
                )  # fmt: skip
                speed_batch = probe_batches(
                    facts.vocab_size, special_ids, max_length, facts.type_vocab_size, [SPEED_BATCH], seed=1
                )[0]
                parity["int8"].update(compare_with_fp32(task, model_path, int8_path, batches, speed_batch))
            if eval_rows is not None:
                with progress.step(f"scoring fp32 and int8 on {len(eval_rows)} eval rows ({metric_name(task)})"):
                    quantization_eval = measure_int8_loss(eval_model, model_path, int8_path, eval_rows, max_loss)
                    quantization_eval["data_sha256"] = file_sha256(Path(eval_data))  # type: ignore[arg-type]
                log_int8_verdict(quantization_eval)
            if quantization_eval.get("int8_accepted", True):
                model_path = int8_path
            else:
                quantize = "none"
                parity.pop("int8")
        ranges: list[list[float]] = []
        if calibration_texts is not None:  # on the CPU graph (an fp16 graph is made from it next)
            use_types = facts.type_vocab_size > 1
            ranges = embedding_ranges(model_path, tokenizer, max_length, special_ids.pad, use_types, calibration_texts)
        if precision == "fp16":
            with progress.step("fusing for GPU and converting to fp16"):
                fp16_path = work / "fp16.onnx"
                fused = graph_rewrites.convert_fp16(model_path, fp16_path, *shape)
                release_memory()
                model_path = fp16_path
                tolerance = default_tolerance("fp16", "none", atol, rtol)
                parity["fp16"] = check_parity(
                    task, model_path, batches, references, outputs, tolerance, "fp16 graph", "fp16"
                )

        with progress.step(f"writing the bundle to {out_dir}"):
            _install_graph(model_path, staging / MODEL_FILE)
            tokenizer.save(str(staging / TOKENIZER_FILE))
            shutil.rmtree(work)
            spec = BundleSpec(
                task=task,
                architecture=architecture,
                max_length=max_length,
                id2label=facts.id2label if TASKS[task].needs_labels else {},
                problem_type=facts.problem_type if task == "text-classification" else None,
                pooling=embedding.pooling if embedding is not None else None,
                normalize=embedding.normalize if embedding is not None else False,
                prompts=prompts,
                default_prompt_name=default_prompt_name,
                embedding_ranges=ranges,
                request_defaults=dict(request_defaults or {}),
                do_lower_case=do_lower_case,
                clean_up_tokenization_spaces=bool(settings.get("clean_up_tokenization_spaces", True)),
                special_tokens=special,
                inputs=list(facts.inputs),
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
                lora=lora,
            )
            write_spec(staging, spec)
            read_bundle(staging)
            _install(staging, out_dir)
    except BundleError as error:
        raise ExportError(f"the written bundle does not read back: {error}") from error
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    logger.info("done: %s (%s, %s); %s", out_dir, task, served_precision(spec), describe_peak(weights_bytes))
    return read_bundle(out_dir)
