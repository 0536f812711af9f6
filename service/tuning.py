"""Start-up auto-tuning: a few seconds of synthetic batches pick a model's batch limits and ORT threads.

Four settings are tuned, each only among a candidate set fixed before any timing (and logged), so the choice
is bounded whatever the clock says; a setting given explicitly is not tuned (its candidate set is that value):

- ``intra_op_threads``: powers of two up to the CPUs the process may use (and that count; a container's CPU
  limit caps it); the fastest at a batch of 4 x 128-token rows wins, fewer threads when within 5 % (other models
  share the cores). A lone batch runs on all of them.
- ``parallel_runs``: 1 or ``model_workers`` batches at once on that session, the same batch run by that many
  threads together; more only when it beats one by 5 % (concurrent runs share the session's threads). A model whose
  threads split (below) runs every worker's batches at once: that is decided, not measured.
- ``max_batch_tokens``: rows of 128 tokens (or the model's max length) in batches of 1, 2, 4 ... rows; the
  token count where throughput stops growing (the smallest batch within 5 % of the best) is the budget.
- ``max_batch_size``: the same sweep with 16-token rows, up to the token budget: how many short rows one call
  should take; never fewer than the long rows the token budget holds.

And two layouts are decided, not measured (their gain or cost is the event loop's share of the cores, which no batch
timed alone shows): a small model (a 128-token row within ``SMALL_MODEL_ROW_S`` on every thread) on a CPU with several
threads and workers splits them (``service.sessions.SplitRunner``): a batch alone on every thread, batches side by side
on one each. ``--split-threads`` decides it instead. And the session a batch runs on alone spins its threads between
the run's operators until the run ends: a split model's every-thread session, and a larger model's one session when its
batches run one at a time on several threads (``--intra-op-spinning`` decides it instead).

Sweeps stop early once throughput stops growing or when the next batch would not fit in the time budget. A sweep the
budget cut while its last step still gained has not found its knee: its setting is then at least the untuned default
(``untuned``; on a slow machine a 1.5 s budget measured only 1 and 2 rows, and batches of 2 served at 0.7x the raw
loop; on a CPU a token budget takes at most ``CPU_UNSETTLED_TOKENS`` of that default). One cut after a step that
gained less than 5 % has seen it: the knee it measured stands (MiniLM's token sweep, cut after 1,024 tokens that lost
to 512, had taken the untuned 8,192: under load SQuAD's 256-token rows then cost 30.7 / 31.6 CPU ms a request at c=32
/ 128 against 25.3 / 24.7 with 512, which served it 1.21x / 1.27x at c=32 / 128,
``benchmarks/results/ab/issue46-tuning-settled-squad-int8.md``). The budget is ``tune_seconds`` per model, unless one
call of the model is so slow that the least the tuner must measure (every thread candidate, two batch sizes of each
sweep) would not fit: then the budget is that least, from a timed call and session build, and the log says so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.onnx_io import PaddedRows
from service.device import CPU, Device, cuda_free_memory
from service.sessions import ModelRunner, OrtRunner
from service.settings import TUNED_SETTINGS, Settings, available_cpus
from service.shape_buckets import ShapeBuckets
from service.tasks.base import ModelContext
from service.tuning_probes import (
    THREADS_PROBE_ROWS,
    CallCost,
    Clock,
    GpuMemory,
    Sweep,
    synthetic_batch,
    time_batch,
)

logger = logging.getLogger(__name__)

LONG_ROW_TOKENS = 128
SHORT_ROW_TOKENS = 16
SIZE_CANDIDATES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
# A GPU keeps gaining from larger batches long after a CPU stops: its sweeps go on up to these, inside its free memory.
GPU_SIZE_CANDIDATES: tuple[int, ...] = (*SIZE_CANDIDATES, 256, 512, 1024)
MAX_THREAD_CANDIDATES = 6
GROWTH = 1.05  # a sweep stops after two steps that do not beat the best by 5 %
# The budget's parts: threads may use the first 35 %, the token sweep up to 75 %, the size sweep the rest.
THREADS_SHARE = 0.35
TOKENS_SHARE = 0.75
# A model whose 128-token row takes at most this long on every thread is small: its batches split the threads
# (service.sessions) where the event loop's share of the cores weighs; a larger one's lone batches keep them all.
SMALL_MODEL_ROW_S = 0.05
# A CPU's batches of long rows stop gaining near a thousand tokens (MiniLM's 256-token rows at 512, BERT-base's
# 128-token rows at 1,024; at 8,192 SQuAD served 1.27x slower at c=128 and BERT-base 0.94x the raw loop at c=32): a
# token sweep cut while it still gained takes at least the untuned budget, but on a CPU no more than this (a GPU
# keeps the untuned budget).
CPU_UNSETTLED_TOKENS = 1024
NEW_SESSION_MARGIN = 2  # a thread count's step also opens a session and may run slower: allow it that much more


@dataclass(frozen=True)
class BatchingChoice:
    """The batch limits and threads one model runs with, and where they came from."""

    max_batch_tokens: int
    max_batch_size: int
    intra_op_threads: int
    parallel_runs: int = 1
    tuned: bool = False
    candidates: dict[str, list[int]] = field(default_factory=dict)  # per tuned setting, what it was picked from
    tokens_per_second: dict[str, dict[int, float]] = field(default_factory=dict)  # what was measured
    seconds: float = 0.0  # time the tuner took
    # a GPU's measured cost of one call in tokens (None: the batch_overhead_tokens setting): its calls cost as much as
    # thousands of padded tokens, so its batches should take rows of any length, where a CPU's group them by length
    overhead_tokens: float | None = None
    split_threads: bool = False  # a batch alone on every thread, batches side by side on one each (service.sessions)
    spin_runs: bool = False  # the every-thread session's threads spin between a run's operators, until it ends

    @classmethod
    def configured(cls, settings: Settings) -> BatchingChoice:
        split = bool(settings.split_threads) and settings.intra_op_threads > 1 and settings.model_workers > 1
        one_thread_runs = settings.intra_op_threads == 1 or split
        runs = settings.parallel_runs or (settings.model_workers if one_thread_runs else 1)
        spin = split if settings.intra_op_spinning is None else settings.intra_op_spinning
        return cls(settings.max_batch_tokens, settings.max_batch_size, settings.intra_op_threads, runs,
                   split_threads=split, spin_runs=spin)  # fmt: skip

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with this choice's values (the batcher reads its policy from settings)."""
        update: dict[str, Any] = {
            "max_batch_tokens": self.max_batch_tokens,
            "max_batch_size": self.max_batch_size,
            "intra_op_threads": self.intra_op_threads,
        }
        if self.overhead_tokens is not None:
            update["batch_overhead_tokens"] = self.overhead_tokens
        return settings.model_copy(update=update)

    def to_json(self) -> dict[str, Any]:
        return {
            "max_batch_tokens": self.max_batch_tokens,
            "max_batch_size": self.max_batch_size,
            "intra_op_threads": self.intra_op_threads,
            "parallel_runs": self.parallel_runs,
            "tuned": self.tuned,
            "candidates": self.candidates,
            "tune_seconds": round(self.seconds, 3),
            "batch_overhead_tokens": None if self.overhead_tokens is None else round(self.overhead_tokens),
            "split_threads": self.split_threads,
            "intra_op_spinning": self.spin_runs,
        }


def thread_candidates(cpu_count: int | None = None) -> list[int]:
    count = max(1, cpu_count or available_cpus())
    powers = [2**k for k in range(count.bit_length()) if 2**k <= count]
    return sorted(set(powers[: MAX_THREAD_CANDIDATES - 1]) | {count})


def size_candidates(device: Device) -> tuple[int, ...]:
    return GPU_SIZE_CANDIDATES if device.is_cuda else SIZE_CANDIDATES


def candidate_sets(
    settings: Settings, max_length: int, max_tokens_cap: int | None = None, device: Device = CPU
) -> dict[str, list[int]]:
    """What each setting may be picked from: the given value alone for an explicit setting. On a GPU the CPU threads
    are not tuned (one runs what CUDA lacks) and batches may grow larger."""
    long_row = min(LONG_ROW_TOKENS, max_length)
    cap = max_tokens_cap or 2**31
    sizes = size_candidates(device)
    tokens = sorted({max(max_length, min(cap, long_row * size)) for size in sizes})
    sets = {
        "intra_op_threads": [1] if device.is_cuda else thread_candidates(available_cpus()),
        "parallel_runs": sorted({1, settings.model_workers}),
        "max_batch_tokens": tokens,
        "max_batch_size": list(sizes),
    }
    for name in TUNED_SETTINGS & settings.model_fields_set:
        sets[name] = [int(getattr(settings, name))]
    return sets


class Tuner:
    def __init__(
        self,
        make_runner: Callable[[int], ModelRunner],
        cls_id: int,
        sep_id: int,
        vocab_size: int,
        max_length: int,
        budget_s: float,
        sizes: tuple[int, ...] = SIZE_CANDIDATES,
        memory: GpuMemory | None = None,
        learn_overhead: bool = False,
        split: bool | None = None,
        spin: bool | None = None,
    ) -> None:
        """``sizes``: the batch sizes (rows) the sweeps may try; ``memory``: a GPU's, to stay inside;
        ``learn_overhead``: measure a call's cost in tokens (a GPU's) instead of taking batch_overhead_tokens;
        ``split``: split the threads (service.sessions) or not, None: for a small model; ``spin``: the every-thread
        session's threads spin while a run is active or not, None: where its batches run alone."""
        self.sizes = sizes
        self.learn_overhead = learn_overhead
        self.split = split
        self.spin = spin
        self.memory = memory
        self.make_runner = make_runner
        self.ids = (cls_id, sep_id, vocab_size)
        self.max_length = max_length
        self.clock = Clock(budget_s)
        self.cost = CallCost(0.0, 0.0)
        self.budget_note = ""

    def _plan(self, runner: ModelRunner, build_s: float, thread_options: int, most_runs: int) -> None:
        """Time one long row and set the budget: ``tune_seconds``, or the least the plan needs on a slow model."""
        single = self._batch(1, min(LONG_ROW_TOKENS, self.max_length))
        self.cost = CallCost(time_batch(runner, single, runs=1), build_s)
        least = self.cost.least_plan_s(thread_options, most_runs) + self.clock.elapsed
        if least > self.clock.budget_s:
            self.budget_note = f"budget {least:.1f} s, the least its sweeps need at this model's speed"
            self.clock.budget_s = least
        else:
            self.budget_note = f"budget {self.clock.budget_s:g} s"

    def _batch(self, rows: int, length: int) -> PaddedRows:
        return synthetic_batch(rows, length, *self.ids)

    def _sweep_threads(self, candidates: list[int], current: tuple[int, ModelRunner]) -> tuple[int, ModelRunner, Sweep]:
        """Every candidate is measured (the budget was set so that they fit)."""
        batch = self._batch(THREADS_PROBE_ROWS, min(LONG_ROW_TOKENS, self.max_length))
        tokens = batch.input_ids.size
        sweep, runners = Sweep(), {current[0]: current[1]}
        for threads in sorted(candidates, key=lambda threads: (threads != current[0], threads)):
            runner = runners.get(threads) or self.make_runner(threads)
            runners[threads] = runner
            seconds = time_batch(runner, batch, self.cost.runs)
            sweep.rates[threads], sweep.last_seconds = tokens / seconds, seconds
        chosen = sweep.knee()
        return chosen, runners[chosen], sweep

    def _sweep_parallel_runs(self, runner: ModelRunner, candidates: list[int], one_run_rate: float) -> Sweep:
        """Tokens/s with k threads running the probe batch on ``runner`` at once, for each k > 1 of ``candidates``
        (k = 1 is the thread sweep's own figure); ties go to fewer runs."""
        batch = self._batch(THREADS_PROBE_ROWS, min(LONG_ROW_TOKENS, self.max_length))
        sweep = Sweep(rates={1: one_run_rate} if 1 in candidates else {})
        for runs in (k for k in sorted(candidates) if k > 1):
            ready = threading.Barrier(runs + 1)
            done = threading.Barrier(runs + 1)
            failures: list[BaseException] = []

            def call(
                ready: threading.Barrier = ready,
                done: threading.Barrier = done,
                failures: list[BaseException] = failures,
            ) -> None:
                try:
                    runner.run(batch)  # warm-up: each thread's first call allocates
                    ready.wait()
                    for _ in range(self.cost.runs):
                        runner.run(batch)
                    done.wait()
                except BaseException as exc:  # handed to the tuner's thread, which raises it: start-up fails, not hangs
                    failures.append(exc)
                    ready.abort()
                    done.abort()

            threads = [threading.Thread(target=call, daemon=True) for _ in range(runs)]
            for thread in threads:
                thread.start()
            try:
                ready.wait()
                started = time.perf_counter()
                done.wait()
            except threading.BrokenBarrierError:
                for thread in threads:
                    thread.join()
                failed = (error for error in failures if not isinstance(error, threading.BrokenBarrierError))
                raise next(failed, RuntimeError("a concurrent tuning run failed")) from None
            seconds = time.perf_counter() - started
            for thread in threads:
                thread.join()
            sweep.rates[runs] = runs * self.cost.runs * batch.input_ids.size / max(seconds, 1e-9)
        return sweep

    def _sweep_rows(self, runner: ModelRunner, length: int, sizes: list[int], share: float) -> Sweep:
        sweep, stalled = Sweep(), 0
        for count, size in enumerate(sizes):
            expected = sweep.last_seconds * 2 * (self.cost.runs + 1)
            if count >= 2 and not self.clock.allows(expected, share):
                sweep.cut_short = True
                break
            if self.memory is not None and not self.memory.fits(size * length):
                break
            seconds = time_batch(runner, self._batch(size, length), self.cost.runs)
            if self.memory is not None:
                self.memory.observe(size * length)
            rate = size * length / seconds
            stalled = stalled + 1 if sweep.rates and rate < GROWTH * max(sweep.rates.values()) else 0
            sweep.rates[size], sweep.last_seconds = rate, seconds
            if stalled >= 2:
                break
        sweep.cut_short = sweep.cut_short and not stalled  # a last step that gained nothing has shown the knee
        return sweep

    def tune(
        self,
        candidates: dict[str, list[int]],
        runner: ModelRunner,
        threads: int,
        build_s: float = 0.0,
        untuned: BatchingChoice | None = None,
    ) -> tuple[BatchingChoice, ModelRunner]:
        """Pick every setting inside ``candidates``; returns the choice and the runner with the chosen threads.
        ``build_s``: how long ``runner``'s session took to build (what another thread count's session will cost);
        ``untuned``: the limits served without tuning, the least a batch sweep cut short by the budget picks."""
        measured: dict[str, dict[int, float]] = {}
        run_options = candidates["parallel_runs"]
        self._plan(runner, build_s, len(candidates["intra_op_threads"]), max(run_options))
        threads, runner, sweep = self._sweep_threads(candidates["intra_op_threads"], (threads, runner))
        measured["intra_op_threads"] = sweep.rates
        # a small model's batches side by side on one thread each, a lone one on all threads: what it gains is the
        # barrier the event loop's work stalls, which no measurement in isolation shows (the A/B in service.sessions);
        # its runs at once are then every worker's, so they are not measured (the budget goes to the batch sweeps)
        split = self.split if self.split is not None else self.cost.row_s <= SMALL_MODEL_ROW_S
        split = split and threads > 1 and max(run_options) > 1
        if split or len(run_options) == 1:
            parallel_runs = max(run_options) if split else run_options[0]
        else:
            runs_sweep = self._sweep_parallel_runs(runner, run_options, sweep.rates[threads])
            measured["parallel_runs"] = runs_sweep.rates
            best = max(runs_sweep.rates.values())
            parallel_runs = min(k for k, rate in runs_sweep.rates.items() if rate * GROWTH >= best)
        long_row = min(LONG_ROW_TOKENS, self.max_length)
        token_options = candidates["max_batch_tokens"]
        if len(token_options) == 1:
            max_tokens = token_options[0]
        else:
            sizes = [size for size in self.sizes if size * long_row <= max(token_options)]
            sweep = self._sweep_rows(runner, long_row, sizes or [1], TOKENS_SHARE)
            measured["max_batch_tokens"] = {size * long_row: rate for size, rate in sweep.rates.items()}
            max_tokens = _at_least(token_options, sweep.knee() * long_row)
            if sweep.cut_short and untuned is not None:
                floor = untuned.max_batch_tokens
                if self.memory is None:
                    floor = min(floor, CPU_UNSETTLED_TOKENS)
                max_tokens = max(max_tokens, _at_least(token_options, floor))
                self.budget_note += "; max_batch_tokens not settled when the budget ended: at least the default"
        size_options = candidates["max_batch_size"]
        if len(size_options) == 1:
            max_size = size_options[0]
        else:
            short_row = min(SHORT_ROW_TOKENS, self.max_length)
            sizes = [size for size in size_options if size * short_row <= max_tokens] or [size_options[0]]
            sweep = self._sweep_rows(runner, short_row, sizes, 1.0)
            measured["max_batch_size"] = sweep.rates
            max_size = _at_least(size_options, max(sweep.knee(), max_tokens // long_row))
            if sweep.cut_short and untuned is not None:
                max_size = max(max_size, _at_least(size_options, untuned.max_batch_size))
                self.budget_note += "; max_batch_size not settled when the budget ended: at least the default"
        # a run's threads that spin between its operators instead of sleeping finish it sooner (a lone BERT-base request
        # 1.10x, benchmarks/results/ab/issue46-spin-lone-runs-base-fp32.md), as long as nothing runs beside it: a split
        # model's lone batches, or one run at a time
        spin = self.spin if self.spin is not None else split or (threads > 1 and parallel_runs == 1)
        overhead = None
        if self.learn_overhead:  # one long row's call, at the best rate measured: what a call costs beyond its tokens
            best = max(rate for rates in measured.values() for rate in rates.values())
            overhead = max(0.0, self.cost.row_s * best - long_row)
        choice = BatchingChoice(
            max_tokens, max_size, threads, parallel_runs, True, candidates, _rounded(measured), self.clock.elapsed,
            overhead, split, spin,
        )  # fmt: skip
        return choice, runner


def _at_least(options: list[int], wanted: int) -> int:
    """The smallest option >= wanted (the largest option when none is)."""
    return next((option for option in sorted(options) if option >= wanted), max(options))


def _rounded(measured: dict[str, dict[int, float]]) -> dict[str, dict[int, float]]:
    return {name: {value: round(rate, 1) for value, rate in rates.items()} for name, rates in measured.items()}


def log_choice(name: str, choice: BatchingChoice, budget_note: str = "") -> None:
    keys = ("max_batch_tokens", "max_batch_size", "intra_op_threads", "parallel_runs")
    chosen = {key: getattr(choice, key) for key in keys}
    logger.info(
        "model %s: tuned in %.2f s (%s): %s; picked from %s; tokens/s measured: %s",
        name,
        choice.seconds,
        budget_note or "budget as given",
        ", ".join(f"{key} {value}" for key, value in chosen.items()),
        choice.candidates,
        choice.tokens_per_second,
    )


def tune_runner(
    name: str,
    model_path: Path,
    outputs: tuple[str, ...],
    context: ModelContext,
    runner: ModelRunner,
    settings: Settings,
    max_tokens_cap: int | None = None,
    build_s: float = 0.0,
    device: Device = CPU,
    buckets: ShapeBuckets | None = None,
) -> tuple[ModelRunner, BatchingChoice]:
    """Tune one loaded model (before its worker starts); returns the runner to serve with and the choice.
    ``build_s``: how long ``runner``'s session took to build; ``buckets``: the shapes its batches are padded to."""
    candidates = candidate_sets(settings, context.max_length, max_tokens_cap, device)
    memory = None
    if device.is_cuda:
        memory = GpuMemory(lambda: (cuda_free_memory(device.index) or (None, 0))[0])
    tuner = Tuner(
        lambda threads: OrtRunner(model_path, outputs, threads, bool(settings.intra_op_spinning), device, buckets),
        context.cls_token_id,
        context.sep_token_id,
        context.tokenizer.get_vocab_size(),
        context.max_length,
        settings.tune_seconds,
        size_candidates(device),
        memory,
        learn_overhead=device.is_cuda and "batch_overhead_tokens" not in settings.model_fields_set,
        split=False if device.is_cuda else settings.split_threads,
        spin=False if device.is_cuda else settings.intra_op_spinning,
    )
    threads = candidates["intra_op_threads"][0] if device.is_cuda else settings.intra_op_threads
    choice, runner = tuner.tune(candidates, runner, threads, build_s, BatchingChoice.configured(settings))
    note = tuner.budget_note
    if memory is not None and memory.budget is not None and memory.free_at_start is not None:
        largest = max(memory.used.values(), default=0)
        note += f"; {device.name}: {memory.free_at_start / 2**30:.1f} GiB free, batches kept under "
        note += f"{memory.budget / 2**30:.1f} GiB (the largest tried took {largest / 2**20:.0f} MiB)"
    log_choice(name, choice, note)
    return runner, choice
