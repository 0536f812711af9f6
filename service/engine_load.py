"""A bundle made ready for an Engine: its task handler, the tokenizer context with the default prompt the settings
choose, and the ORT sessions the batching choice asks for (configured or tuned; one session, or a split pair)."""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contract.bundle import Bundle, BundleError, read_bundle
from contract.tasks import task_spec
from service.batch_rows import MAX_TOKEN_OUTPUT_BYTES
from service.device import Device, DeviceUnavailable, resolve_device
from service.sessions import ModelRunner, OrtRunner, SplitRunner, token_output_width
from service.settings import Settings
from service.shape_buckets import ShapeBuckets
from service.tasks import HANDLERS, unit_of
from service.tasks.base import ModelContext, TaskHandler
from service.tuning import BatchingChoice, tune_runner


def default_prompt(bundle: Bundle, settings: Settings) -> str:
    """The text an embedding model prepends when a request names no prompt: --default-prompt, else the prompt
    --default-prompt-name names, else the bundle's own default_prompt_name's; "" for none (and for other tasks)."""
    spec = bundle.spec
    if not unit_of(spec.task).prompts:
        return ""
    if settings.default_prompt is not None:
        return settings.default_prompt
    name = settings.default_prompt_name or spec.default_prompt_name
    if name is None:
        return ""
    if name not in spec.prompts:
        known = ", ".join(sorted(spec.prompts)) or "none"
        raise BundleError(bundle.path, f"default prompt name {name!r} is not one of the model's prompts ({known})")
    return spec.prompts[name]


def load_context(bundle: Bundle, settings: Settings | None = None) -> ModelContext:
    """The handler's view of a bundle, with the default prompt the settings choose."""
    return ModelContext.from_bundle(bundle, default_prompt(bundle, settings or Settings()))


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """What ``Engine`` is built from; ``fresh`` builds the session that replaces ``runner`` when a worker dies."""

    name: str
    bundle: Bundle
    handler: TaskHandler
    context: ModelContext
    runner: ModelRunner
    fresh: Callable[[], ModelRunner]
    batching: BatchingChoice
    device: Device


def shape_buckets(settings: Settings, device: Device, context: ModelContext) -> ShapeBuckets | None:
    """The buckets batches are padded to (``--shape-buckets``; by default on a GPU only), or None."""
    wanted = device.is_cuda if settings.shape_buckets is None else settings.shape_buckets
    return ShapeBuckets(context.pad_token_id, context.max_length) if wanted else None


def load_model(
    path: Path | str,
    settings: Settings,
    name: str | None = None,
    handler: TaskHandler | None = None,
    device: Device | None = None,
) -> LoadedModel:
    """Read and check the bundle, load tokenizer and ORT session. Raises BundleError naming the folder, and
    DeviceUnavailable when the session cannot run on ``device`` (None: ``settings.device``, resolved here)."""
    device = device or resolve_device(settings.device)
    bundle = read_bundle(path)
    if handler is None:
        if bundle.spec.task not in HANDLERS:
            raise BundleError(bundle.path, f"the service does not serve task {bundle.spec.task!r}")
        handler = HANDLERS[bundle.spec.task]
    context = load_context(bundle, settings)
    outputs = tuple(bundle.spec.outputs)
    spin = bool(settings.intra_op_spinning)
    # on a GPU the CPU threads only run the few operators CUDA lacks: one, unless set
    own_threads = device.is_cuda and "intra_op_threads" not in settings.model_fields_set
    first_threads = 1 if own_threads else settings.intra_op_threads
    buckets = shape_buckets(settings, device, context)

    def make_runner(threads: int = first_threads, spin: bool = spin) -> OrtRunner:
        try:
            return OrtRunner(bundle.model_path, outputs, threads, spin, device, buckets)
        except DeviceUnavailable:
            raise
        except Exception as exc:
            raise BundleError(bundle.path, f"model.onnx cannot be loaded: {exc}") from exc

    built = time.perf_counter()
    first = make_runner()
    build_s = time.perf_counter() - built
    name = name or bundle.path.name
    batching = None
    width = token_output_width(first, task_spec(bundle.spec.task).token_level)
    cap = MAX_TOKEN_OUTPUT_BYTES // (4 * width) if width else None
    if buckets is not None and cap is not None:  # a padded batch's per-token outputs stay within the same cap
        buckets = first.buckets = dataclasses.replace(buckets, max_padded_tokens=cap)
    reusable: OrtRunner | None = first  # served as it is unless tuning or a split needs fresh sessions
    if settings.tunes():
        tuned, batching = tune_runner(
            name, bundle.model_path, outputs, context, first, settings, cap, build_s, device, buckets
        )
        # the tuner's sessions keep the arena their largest trial batch grew: serve on fresh ones
        reusable = None
        del tuned, first
    threads = batching.intra_op_threads if batching is not None else first_threads
    batching = batching or BatchingChoice.configured(settings)
    if batching.split_threads and device.is_cuda:  # a GPU's CPU threads only run what CUDA lacks
        batching = dataclasses.replace(batching, split_threads=False, spin_runs=bool(settings.intra_op_spinning))
    fresh: Callable[[], ModelRunner] = functools.partial(make_runner, threads, batching.spin_runs)
    if batching.split_threads:  # a lone batch on every thread, concurrent ones on one thread each

        def fresh() -> ModelRunner:
            # a lone batch's threads spin while it runs: nothing else runs beside it (``SplitRunner``)
            return SplitRunner(make_runner(threads, spin=batching.spin_runs), make_runner(1, spin=False))

    runner = reusable if reusable is not None and not batching.split_threads else fresh()
    replacement = fresh
    if buckets is not None and device.is_cuda:  # the engine's warm-up covers the first session, not a replacement

        def replacement() -> ModelRunner:
            session = fresh()
            limits = (batching.max_batch_size, batching.max_batch_tokens)
            buckets.warm_up(session, context.cls_token_id, context.sep_token_id, *limits)
            return session

    return LoadedModel(name, bundle, handler, context, runner, replacement, batching, device)
