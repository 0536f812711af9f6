"""One served model: bundle -> tokenizer context + task handler + batcher + workers. No FastAPI.

engine = Engine.from_bundle(path, settings)
await engine.start()                     # worker threads + one warm-up batch
results = await engine.infer(inputs, params)
await engine.stop(drain=True)
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tokenizers import Encoding

from contract.bundle import Bundle
from contract.tasks import task_spec
from service.batch_rows import RowOutputs, batch_policy
from service.batcher import Batcher
from service.device import CPU, Device
from service.engine_load import load_model
from service.errors import BadRequest, NotReady, Overloaded, PayloadTooLarge, RequestTimeout
from service.prepare_stage import (
    MAX_TOKENS_PER_CHAR,
    DecodeShare,
    Stage,
    TokenYield,
    check_token_cap,
    holding,
    input_texts,
    ledger_of,
    run_admitted,
    seed_rate,
)
from service.runtime import BatchObserver, Lane, Worker
from service.sessions import ModelRunner, token_output_width
from service.settings import Settings
from service.shape_buckets import ShapeBuckets
from service.statistics import ModelStatistics
from service.supervision import WorkerPool
from service.tasks import BY_TASK
from service.tasks.base import InputError, ModelContext, ModelRow, Prepared, TaskHandler, TaskUnit
from service.tracing import ACCESS_RECORD
from service.tuning import BatchingChoice

logger = logging.getLogger(__name__)

# The warm-up batches may take this long whatever the request timeout (a slow machine's first call, a 1 s timeout).
WARM_UP_DEADLINE_S = 120.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    task: str
    labels: list[str]
    max_length: int
    quantization: str
    precision: str
    architecture: str
    mask_token: str | None
    device: str = "cpu"
    batching: dict[str, Any] = dataclasses.field(default_factory=dict)
    quantization_eval: dict[str, Any] = dataclasses.field(default_factory=dict)


class Engine:
    def __init__(
        self,
        name: str,
        bundle: Bundle,
        handler: TaskHandler,
        context: ModelContext,
        runner: ModelRunner,
        settings: Settings,
        executor: ThreadPoolExecutor | None = None,
        observer: BatchObserver | None = None,
        batching: BatchingChoice | None = None,
        workers: int = 1,
        make_runner: Callable[[], ModelRunner] | None = None,
        device: Device = CPU,
        shared: tuple[WorkerPool, Callable[[ModelRunner], ModelRunner]] | None = None,
    ) -> None:
        """``workers`` threads share ``runner``, all taking batches from one queue, ``batching.parallel_runs`` of
        them running at once; ``make_runner`` builds the fresh session that replaces it when a worker dies (None:
        not replaced). ``shared``: another engine's pool whose workers and session serve this one's queue too (a
        LoRA adapter's, on its base's), with how a replacement session becomes this engine's runner."""
        self.name = name
        self.device = device
        self.bundle = bundle
        self.handler = handler
        self.context = context
        self.settings = settings
        token_level = task_spec(bundle.spec.task).token_level
        self.batching = batching or BatchingChoice.configured(settings)
        policy = batch_policy(self.batching.apply(settings), token_output_width(runner, token_level))
        unit = BY_TASK.get(bundle.spec.task) or TaskUnit(bundle.spec.task, handler)
        # The request limits, resolved once: (the setting's name, its value).
        self.max_inputs = (unit.max_inputs_setting, int(getattr(settings, unit.max_inputs_setting)))
        self.max_tokens = (unit.max_tokens_setting, int(getattr(settings, unit.max_tokens_setting)))
        if unit.queue_holds_a_request:
            policy = dataclasses.replace(policy, max_queue=max(policy.max_queue, self.max_inputs[1]))
        runs = max(1, min(workers, self.batching.parallel_runs))  # the gate's width, for the batcher and the pool
        if shared is None:
            self.batcher = Batcher(policy, name, workers=workers, parallel_runs=runs)
            self.pool = WorkerPool(
                name, self.batcher, runner, make_runner, workers, context.pad_token_id, token_level, observer, runs
            )
            self.lane = self.pool.own
        else:
            self.pool, rebind = shared
            lock = self.pool.lanes.lock
            self.batcher = Batcher(policy, name, len(self.pool.workers), self.pool.parallel_runs, lock)
            self.lane = Lane(name, self.batcher, runner, observer, rebind)
            self.pool.add_lane(self.lane)
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(settings.prepare_threads, thread_name_prefix=f"prepare-{name}")
        self._ledger = ledger_of(self._executor, settings.prepare_threads)
        self._token_yield = TokenYield()
        self._decode_share = DecodeShare()
        self._started = False
        self._warmed_up = False
        self._stopping = False
        self.statistics = ModelStatistics()  # the batcher counts into it once the model is warm
        self.rate_of: Engine | None = None  # the engine whose measured time per token this one shares (an adapter's)

    @property
    def workers(self) -> list[Worker]:
        return self.pool.workers

    @classmethod
    def from_bundle(
        cls,
        path: Path | str,
        settings: Settings | None = None,
        name: str | None = None,
        handler: TaskHandler | None = None,
        executor: ThreadPoolExecutor | None = None,
        observer: BatchObserver | None = None,
        device: Device | None = None,
    ) -> Engine:
        """The Engine of the bundle at ``path``, as ``service.engine_load.load_model`` readies it (its errors)."""
        settings = settings or Settings()
        got = load_model(path, settings, name, handler, device)
        return cls(
            got.name, got.bundle, got.handler, got.context, got.runner, settings, executor, observer, got.batching,
            settings.model_workers, got.fresh, got.device,
        )  # fmt: skip

    @property
    def task(self) -> str:
        return self.bundle.spec.task

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The prepare threads (the core's, shared by its engines, unless this engine made its own)."""
        return self._executor

    @property
    def ready(self) -> bool:
        return self._warmed_up and not self._stopping and self.pool.live > 0 and not self.batcher.suspended

    @property
    def info(self) -> ModelInfo:
        spec = self.bundle.spec
        return ModelInfo(
            name=self.name,
            task=spec.task,
            labels=[spec.id2label[k] for k in sorted(spec.id2label)],
            max_length=spec.max_length,
            quantization=spec.quantization,
            precision=spec.precision,
            architecture=spec.architecture,
            mask_token=spec.special_tokens.mask_token if spec.task == "fill-mask" else None,
            device=self.device.name,
            batching={
                **self.batching.to_json(),
                "workers": len(self.workers),
                "parallel_runs": self.pool.parallel_runs,
                "shape_buckets": getattr(self.lane.runner, "buckets", None) is not None,
            },
            quantization_eval=dict(spec.quantization_eval),
        )

    async def start(self) -> None:
        """Start the workers, run one warm-up batch through the whole path and one that measures the model's
        time per token (what admission by cost needs before traffic has measured it)."""
        if not self._started:
            self._started = True
            self.pool.start()
        if not self._warmed_up:
            started = time.perf_counter()
            observer, self.lane.observer = self.lane.observer, None  # warm-up is no traffic: not in the metrics
            try:
                await self._warm_up()
            finally:
                self.lane.observer = observer
            self._warmed_up = True
            self.batcher.statistics = self.statistics
            logger.info("model %s (%s) warmed up in %.3f s", self.name, self.task, time.perf_counter() - started)

    async def _warm_up(self) -> None:
        ctx = self.context
        ids = np.array([ctx.cls_token_id] + [ctx.mask_token_id] * 6 + [ctx.sep_token_id], dtype=np.int64)
        deadline_s = max(self.settings.timeout_s, WARM_UP_DEADLINE_S)  # a first call's set-up is no request's cost
        await self.batcher.run([ModelRow(ids, np.zeros_like(ids))], deadline_s)
        if self.rate_of is None:
            loop = asyncio.get_running_loop()
            buckets = getattr(self.lane.runner, "buckets", None)
            if buckets is not None and self.device.is_cuda:  # before the rate probe: it times a warm shape
                await loop.run_in_executor(self._executor, self._warm_buckets, buckets)
            await self.batcher.run(self._rate_probe(), deadline_s)
            await loop.run_in_executor(self._executor, seed_rate, self._ledger, ctx.tokenizer)
        else:  # a LoRA adapter costs what its base costs: no probe batch, and its base seeds their one ledger
            self.batcher.rate.adopt(self.rate_of.batcher.rate)

    def _warm_buckets(self, buckets: ShapeBuckets) -> None:
        """Run each batch shape this model's batches can be padded to once, before it serves (on a GPU a first run
        sets a shape up: ``service.shape_buckets``)."""
        started, ctx, policy = time.perf_counter(), self.context, self.batcher.policy
        done, total = buckets.warm_up(self.lane.runner, ctx.cls_token_id, ctx.sep_token_id, policy.max_batch_size,
                                      policy.max_batch_tokens)  # fmt: skip
        logger.info("model %s: ran %d of its %d batch shapes once in %.1f s", self.name, done, total,
                    time.perf_counter() - started)  # fmt: skip

    def _rate_probe(self) -> list[ModelRow]:
        """Rows of the longest length the model takes, enough for one batch of ``rate.min_tokens``."""
        ctx, policy = self.context, self.batcher.policy
        length = max(2, min(ctx.max_length, policy.max_batch_tokens))
        count = max(1, min(policy.max_batch_size, policy.max_batch_tokens // length,
                           -(-self.batcher.rate.min_tokens // length)))  # fmt: skip
        ids = np.array([ctx.cls_token_id] + [ctx.mask_token_id] * (length - 2) + [ctx.sep_token_id], dtype=np.int64)
        return [ModelRow(ids, np.zeros_like(ids)) for _ in range(count)]

    def with_request_defaults(self, params: Any, explicit: Callable[[], frozenset[str]] | None) -> Any:
        """``params`` with the bundle's request defaults in place of the parameters the request left out
        (``explicit()``: the ones it gave, worked out only here, for a model that has defaults)."""
        defaults = self.bundle.spec.request_defaults
        if not defaults or explicit is None or not dataclasses.is_dataclass(params):
            return params
        names = {item.name for item in dataclasses.fields(params)}
        given = explicit()
        chosen = {key: value for key, value in defaults.items() if key not in given and key in names}
        return dataclasses.replace(params, **chosen) if chosen else params  # type: ignore[type-var]

    async def infer(
        self, inputs: list[Any], params: Any, timeout_s: float | None = None, background: bool = False
    ) -> list[Any]:
        """One request: prepare -> batcher -> postprocess; a result per input, within ``timeout_s`` (the settings'
        ``timeout_s`` when None or longer: a gRPC client's deadline may be shorter). A short request is prepared and
        post-processed on the event loop (a thread hop costs more); a long one on the prepare threads, once their
        ledger admits it (service/prepare_stage.py), so neither its tokenizing nor its decoding holds the loop.
        ``background``: a batch job's request, whose rows wait for the online queue to empty (no deadline there).
        Counted in the model's statistics once it is warm (``service.statistics``)."""
        statistics = self.batcher.statistics
        if statistics is None:
            return await self._admit(inputs, params, timeout_s, background)
        started = time.perf_counter()
        try:
            results = await self._admit(inputs, params, timeout_s, background)
        except Exception:
            statistics.failed(time.perf_counter() - started)
            raise
        statistics.succeeded(len(inputs), time.perf_counter() - started)
        return results

    async def _admit(self, inputs: list[Any], params: Any, timeout_s: float | None, background: bool) -> list[Any]:
        if self._stopping or not self._started:
            raise NotReady(f"model {self.name} is not accepting requests")
        budget = self.settings.timeout_s if timeout_s is None else min(timeout_s, self.settings.timeout_s)
        deadline = time.perf_counter() + budget
        texts = input_texts(inputs)
        chars = sum(len(text) for text in texts)
        if chars <= self.settings.prepare_inline_chars:
            return await self._infer(inputs, params, texts, chars, deadline, budget, None, background)
        try:
            self._ledger.admit(chars, self.batcher.seconds_ahead(), budget, self._model_seconds_of(chars))
        except (Overloaded, PayloadTooLarge):
            self.batcher.shed["before_tokenizing"] += 1
            raise
        async with holding(self._ledger, chars) as stage:
            return await self._infer(inputs, params, texts, chars, deadline, budget, stage, background)

    def _model_seconds_of(self, chars: int) -> float:
        """The model time a long request of ``chars`` characters is expected to take (0 until measured)."""
        tokens = self._token_yield.tokens(chars)
        seconds = None if tokens is None else self.batcher.estimate_seconds(tokens, self.batcher.parallel_runs)
        return seconds or 0.0

    async def _infer(
        self,
        inputs: list[Any],
        params: Any,
        texts: list[str],
        chars: int,
        deadline: float,
        budget: float,
        stage: Stage | None,
        background: bool = False,
    ) -> list[Any]:
        record = ACCESS_RECORD.get()
        spans = record.spans if record is not None else None  # a traced request's stages (service.tracing)
        preparing = time.perf_counter() if spans is not None else 0.0
        try:
            prepare = functools.partial(self._prepare, inputs, params, texts, chars)
            prepared = prepare() if stage is None else await stage.run(self._executor, prepare)
        except InputError as exc:
            raise BadRequest(str(exc)) from exc
        sequences = [seq for item in prepared for seq in item.sequences]
        tokenized_s = stage.seconds if stage is not None else 0.0
        if stage is not None:
            self._token_yield.observe(chars, sum(len(seq) for seq in sequences))
        if spans is not None:
            spans.append(("admission", deadline - budget, preparing, {"bertserve.characters": chars}))
            spans.append(("tokenize", preparing, time.perf_counter(), {"bertserve.sequences": len(sequences)}))
        self._check_lengths(sequences)
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise RequestTimeout(f"request timed out after {budget:g} s")
        if record is not None:
            record.model, record.inputs = self.name, len(inputs)
        try:
            reserve = self._decode_share.seconds(tokenized_s)  # the deadline covers the decoding after the model
            rows = await self.batcher.run(sequences, remaining, record, spare=background, reserve_s=reserve)
        except RequestTimeout:
            raise RequestTimeout(f"request timed out after {budget:g} s") from None
        decoding = time.perf_counter() if spans is not None else 0.0
        try:
            decode = functools.partial(self._postprocess, prepared, rows, params)
            results = decode() if stage is None else await stage.run(self._executor, decode)
        except InputError as exc:
            raise BadRequest(str(exc)) from exc
        if stage is not None:
            self._decode_share.observe(tokenized_s, stage.seconds - tokenized_s)
        if spans is not None:
            spans.append(("post-process", decoding, time.perf_counter(), {}))
        return results

    def _postprocess(self, prepared: list[Prepared], rows: list[RowOutputs], params: Any) -> list[Any]:
        results: list[Any] = []
        offset = 0
        for item in prepared:
            count = len(item.sequences)
            results.append(self.handler.postprocess(self.context, item, rows[offset : offset + count], params))
            offset += count
        return results

    def _prepare(self, inputs: list[Any], params: Any, texts: list[str], chars: int) -> list[Prepared]:
        """The token cap (PayloadTooLarge; counted only for text that could hold more tokens than the cap), then
        the handler's tokenization."""
        if chars * MAX_TOKENS_PER_CHAR > self.max_tokens[1]:
            self._check_token_cap(texts)
        return self.handler.prepare(self.context, inputs, params)

    def _check_token_cap(self, texts: list[str]) -> None:
        setting, limit = self.max_tokens
        check_token_cap(self.context.tokenizer, texts, limit, setting)

    async def _off_the_loop(self, size: int, work: Callable[[], T]) -> T:
        """``work()`` inline when ``size`` (characters or ids) is small, else on the prepare threads once their
        ledger admits it (service/prepare_stage.py): a long tokenization never holds the event loop, and one that
        would wait past its deadline is refused before it starts."""
        if size <= self.settings.prepare_inline_chars:
            return work()
        ahead = self.batcher.seconds_ahead()
        return await run_admitted(self._executor, self._ledger, size, work, ahead, self.settings.timeout_s)

    async def tokenize(self, texts: list[str], add_special_tokens: bool, shape: Callable[[list[Encoding]], T]) -> T:
        """``shape`` of the model's encoding of each text (TEI's /tokenize), through the request token cap; a long
        request's encoding and shaping (an object per token) run off the event loop."""

        def work() -> T:
            self._check_token_cap(texts)
            return shape([self.context.tokenizer.encode(text, add_special_tokens=add_special_tokens) for text in texts])

        return await self._off_the_loop(sum(len(text) for text in texts), work)

    async def decode(self, id_lists: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """The text of each list of token ids (TEI's /decode): at most the request token cap of ids."""
        (setting, limit), count = self.max_tokens, sum(len(ids) for ids in id_lists)
        if count > limit:
            raise PayloadTooLarge(f"{count} token ids in one request; the limit is {limit} ({setting})")
        tokenizer = self.context.tokenizer
        return await self._off_the_loop(
            count, lambda: [tokenizer.decode(ids, skip_special_tokens=skip_special_tokens) for ids in id_lists]
        )

    async def stop(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Refuse new requests; finish (``drain``) or fail queued ones; stop the worker."""
        self._stopping = True
        self.batcher.close(drain=drain)
        if self.pool.closed():  # the last model on these workers: no replacements, and they end once drained
            self.pool.stop()
            await asyncio.to_thread(self.pool.join, timeout_s)
        if self._own_executor:
            self._executor.shutdown(wait=False)

    def _check_lengths(self, sequences: list[ModelRow]) -> None:
        limit = self.context.max_length
        for seq in sequences:
            if not 0 < len(seq) <= limit:
                raise BadRequest(f"an input became {len(seq)} tokens; model {self.name} takes 1..{limit}")
