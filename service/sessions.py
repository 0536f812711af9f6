"""A model's ONNX Runtime sessions: ``OrtRunner`` (one session, on the CPU or a CUDA GPU) and ``SplitRunner`` (a
small model's two sessions on a CPU, every core's threads for a batch that runs alone and one thread each for batches
that run side by side), with the CPU arena every session of the process shares.

Why split: one session with every core's threads runs a lone batch fastest (a lone request's latency). Under load
it is the slower layout: each operator's threads meet at a barrier, and on a machine whose cores also run the event
loop and the tokenizer one descheduled thread stalls the others; batches side by side on one thread each do more rows
a second (2 cores, MiniLM-L6 SST-2 fp32, c=32/128: 1.09x / 1.08x, and 0.67x at c=1 where that layout served alone:
``benchmarks/results/ab/issue46-thread-split-probe-fp32.md``). So a batch that runs alone (no other batch running, no
row queued behind it) gets every core, its threads spinning while it runs (nothing else needs the cores then;
``session.force_spinning_stop`` ends the spinning with the run), and otherwise runs on the one-thread session beside
the other workers' batches. The two kinds never overlap: a run on every core waits for the one-thread runs to end,
and they for it. The one-thread session holds the weights a second time: only small models split (``service.tuning``
decides; ``--no-split-threads`` keeps one session).
"""

from __future__ import annotations

import copy
import ctypes
import logging
import threading
from pathlib import Path
from typing import Protocol

import numpy as np
import onnxruntime as ort

from contract.onnx_io import PaddedRows, ort_session
from service.device import CPU, Device, check_session_device
from service.shape_buckets import ShapeBuckets

logger = logging.getLogger(__name__)

# Batches of at least this many padded tokens give their activations back to the system when they end: the arena
# otherwise keeps the largest batch's peak for good, and at this size a fresh allocation costs little.
SHRINK_ARENA_TOKENS = 2048
SHARED_ARENA = {"session.use_env_allocators": "1"}


_arena_lock = threading.Lock()
_arena_registered = False


def share_one_arena() -> None:
    """Register one CPU arena for every session of this process (sessions opt in with ``use_env_allocators``): a
    model's activations then reuse what another model's batch freed, instead of each session keeping its own peak."""
    global _arena_registered
    with _arena_lock:
        if not _arena_registered:
            memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(memory, ort.OrtArenaCfg(0, -1, -1, -1))
            _arena_registered = True


def release_free_memory() -> None:
    """Hand freed heap pages back to the system (glibc keeps the model file's parse buffers otherwise)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        logger.debug("malloc_trim is not available here")


class ModelRunner(Protocol):
    output_names: tuple[str, ...]

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]: ...


def token_output_width(runner: ModelRunner, token_level: frozenset[str]) -> int:
    """Floats per token of the widest per-token output, from the graph's declared shapes (0 when unknown)."""
    widths = [0]
    for name, shape in getattr(runner, "output_shapes", {}).items():
        if name in token_level:
            widths.append(int(np.prod([dim for dim in shape[2:] if isinstance(dim, int)] or [1])))
    return max(widths)


class OrtRunner:
    """One onnxruntime InferenceSession, on the CPU or on a CUDA GPU.

    On a GPU a batch is bound with IOBinding: the padded inputs go to the device once, every operator runs there,
    and the outputs come back once; fp16 graphs keep float32 outputs (export's keep_io_types), cast here if not.
    ``buckets``: each batch runs padded up to its bucket's shape and only its own rows come back
    (``service.shape_buckets``: on a GPU by default)."""

    def __init__(
        self,
        model_path: Path,
        output_names: tuple[str, ...],
        intra_op_threads: int,
        spin: bool = False,
        device: Device = CPU,
        buckets: ShapeBuckets | None = None,
    ) -> None:
        self.device = device
        self._bound = device.is_cuda  # read per batch: a plain attribute
        if device.is_cuda:
            self.session = ort_session(model_path, threads=intra_op_threads, spin=spin, providers=device.providers())
            check_session_device(self.session, device)
        else:
            share_one_arena()
            # spinning, when on, only while a run is active: between runs the event loop needs the cores
            config = {**SHARED_ARENA, "session.force_spinning_stop": "1"} if spin else SHARED_ARENA
            self.session = ort_session(model_path, threads=intra_op_threads, spin=spin, config=config)
        found = {out.name for out in self.session.get_outputs()}
        missing = [name for name in output_names if name not in found]
        if missing:
            raise ValueError(f"model.onnx lacks outputs {missing} (has {sorted(found)})")
        self.output_names = output_names
        self.output_shapes = {node.name: list(node.shape) for node in self.session.get_outputs()}
        self.buckets = buckets
        self._input_names = [inp.name for inp in self.session.get_inputs()]
        self._plain: ort.RunOptions | None = None
        self.adapter: ort.LoraAdapter | None = None  # a LoRA adapter every run has active (with_adapter)
        self._shrink = ort.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def with_adapter(self, path: Path) -> OrtRunner:
        """This session, every run with the LoRA adapter file ``path`` active (ONNX Runtime's adapter format: its
        values replace the graph's overridable initializers of those names)."""
        adapter = ort.LoraAdapter()
        adapter.Load(str(path))
        runner = copy.copy(self)
        runner._plain, runner._shrink = ort.RunOptions(), ort.RunOptions()
        runner._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        for options in (runner._plain, runner._shrink):
            options.add_active_adapter(adapter)
        runner.adapter = adapter  # kept alive as long as the runs that use it
        return runner

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        if self.buckets is None:
            return self._run_feeds(batch.feeds)
        rows = len(batch.lengths)
        outputs = self._run_feeds(self.buckets.pad(batch.feeds))
        return {name: array[:rows] for name, array in outputs.items()}

    def _run_feeds(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._bound:
            return self._run_bound(feeds)
        ids = feeds["input_ids"]
        options = self._shrink if ids.shape[0] * ids.shape[1] >= SHRINK_ARENA_TOKENS else self._plain
        inputs = {name: feeds[name] for name in self._input_names}
        arrays = self.session.run(list(self.output_names), inputs, options)
        return dict(zip(self.output_names, arrays, strict=True))

    def _run_bound(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        binding = self.session.io_binding()  # one per call: concurrent runs on the session each bind their own
        for name in self._input_names:
            binding.bind_cpu_input(name, feeds[name])
        for name in self.output_names:
            binding.bind_output(name, "cuda", self.device.index)
        self.session.run_with_iobinding(binding, self._plain)
        arrays = binding.copy_outputs_to_cpu()
        return {
            name: array.astype(np.float32) if array.dtype == np.float16 else array
            for name, array in zip(self.output_names, arrays, strict=True)
        }


class CoreShare:
    """Who runs on the cores now: one run on every core, or any number of one-thread runs (the workers' count
    bounds them). Shared by a model's split runner and its LoRA adapters' (their batches run on the same cores)."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._one_thread_runs = 0
        self._all_cores = False

    def begin(self, backlog: int) -> bool:
        """Wait for this thread's turn; True: run on every core (nothing else runs and no row waits behind the
        batch), False: on one thread beside the others."""
        with self._turn:
            while self._all_cores:
                self._turn.wait()
            if backlog > 0 or self._one_thread_runs > 0:
                self._one_thread_runs += 1
                alone = False
            else:
                self._all_cores = alone = True
        return alone

    def end(self, alone: bool) -> None:
        with self._turn:
            if alone:
                self._all_cores = False
            else:
                self._one_thread_runs -= 1
            self._turn.notify_all()


class SplitRunner:
    """A ModelRunner over two sessions of one model: ``all_cores`` (every core's threads) and ``one_thread``,
    each batch on the one ``share`` gives it."""

    def __init__(self, all_cores: OrtRunner, one_thread: OrtRunner, share: CoreShare | None = None) -> None:
        self.all_cores = all_cores
        self.one_thread = one_thread
        self.share = share or CoreShare()
        self.output_names = all_cores.output_names
        self.output_shapes = all_cores.output_shapes
        self.device = all_cores.device

    def run(self, batch: PaddedRows, backlog: int = 0) -> dict[str, np.ndarray]:
        """``backlog``: rows queued behind this batch when it was cut (another batch could start beside it)."""
        alone = self.share.begin(backlog)
        try:
            return (self.all_cores if alone else self.one_thread).run(batch)
        finally:
            self.share.end(alone)

    def with_adapter(self, path: Path) -> SplitRunner:
        """Both sessions with the LoRA adapter ``path`` active, on the same cores' turns as this one."""
        return SplitRunner(self.all_cores.with_adapter(path), self.one_thread.with_adapter(path), self.share)
