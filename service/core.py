"""The core a transport serves from: bundles loaded on the device, the registry, the engines' workers, the metrics.

No FastAPI here: the HTTP app (``service.app``) receives a ``ServiceCore`` and only starts and stops it; any other
transport (gRPC, a batch runner, a script) does the same and calls ``infer``:

    core = ServiceCore(settings)
    core.load()                              # bundles -> engines (BundleError / DeviceUnavailable: one line)
    await core.start()                       # workers + warm-up, in the background: ``core.ready`` turns True
    result = await core.infer(InferenceRequest(task, inputs, params, model))
    await core.stop()                        # refuse new work, drain the queues, stop the workers

The registry holds the loaded engines by name, the model-selection rules and the service's readiness.

The request path every protocol shares: pick the engine, check the request's size, run it, and give it up
when the client goes away.

A protocol's adapter (``service.api``) turns its body into an ``InferenceRequest`` and the ``InferenceResult``
into its response. Nothing here knows HTTP: a caller that can tell when its client disconnects passes
``client_gone``, a function whose awaitable returns when that happens.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from contract.bundle import BundleError
from service.adapters import adapter_engines
from service.device import resolve_device
from service.engine import Engine
from service.errors import BadRequest, ClientClosedRequest, ModelNotFound, Overloaded, PayloadTooLarge
from service.metrics import ServiceMetrics
from service.oip.shared_memory import SharedMemoryRegions
from service.repository import ModelRepository
from service.sessions import release_free_memory
from service.settings import Settings
from service.tasks import BY_TASK
from service.trace_settings import TraceSettings
from service.tracing import configure as configure_tracing

if TYPE_CHECKING:
    from service.engine import Engine
    from service.processes import Siblings
    from service.schemas.common import TaskRequest


logger = logging.getLogger(__name__)


def load_engines(
    sources: Mapping[str, Path],
    settings: Settings,
    executor: ThreadPoolExecutor | None = None,
    broken: dict[str, str] | None = None,
) -> dict[str, Engine]:
    """Load every bundle. The first bad one raises BundleError naming its folder, unless ``broken`` is given:
    then every bad one is skipped and recorded there, name -> what is wrong with it. DeviceUnavailable (the device
    setting cannot be had) is never skipped."""
    engines: dict[str, Engine] = {}
    device = resolve_device(settings.device)
    for name, path in sources.items():
        try:
            engines[name] = Engine.from_bundle(path, settings, name=name, executor=executor, device=device)
            engines.update(adapter_engines(engines[name]))  # a LoRA base bundle's adapters: NAME:ADAPTER
        except BundleError as exc:
            if broken is None:
                raise
            logger.error("skipping model %s: %s", name, exc)
            broken[name] = exc.problem
    release_free_memory()  # the model files' parse buffers: about a third of a model's size at ready
    return engines


class ModelRegistry:
    def __init__(
        self, engines: Mapping[str, Engine], broken: Mapping[str, str] | None = None, default: str | None = None
    ) -> None:
        """``default``: the model a request that names none goes to, when several are served and it serves the
        request's task (``--default-model``)."""
        self.engines = dict(engines)
        self.broken = dict(broken or {})  # bundles skipped at start-up (skip_broken): name -> reason
        if default is not None and default not in self.engines:
            raise ValueError(f"default model {default!r} is not loaded (loaded: {', '.join(sorted(self.engines))})")
        self.default = default
        self.shutting_down = False
        self.started = False
        self.accepting = True  # one serving process of several (service.processes) sets it once it opens the port

    @property
    def warm(self) -> bool:
        """Every model started and warmed up, and not shutting down."""
        return self.started and not self.shutting_down and all(engine.ready for engine in self.engines.values())

    @property
    def ready(self) -> bool:
        """Warm and taking connections: what readiness reports."""
        return self.warm and self.accepting

    def select(self, task: str | None, name: str | None, unnamed: str = "name the model") -> Engine:
        """The engine for a request: by name (serving ``task``, or any task when None), else the only one serving
        ``task`` (or any task when None), else the default model when it serves ``task``. ``unnamed``: what a
        request of any task that names none is told to do when several models are served and none is the default."""
        if name is None and self.default is not None:
            only = [engine for engine in self.engines.values() if task is None or engine.task == task]
            if len(only) != 1 and (task is None or self.engines[self.default].task == task):
                name = self.default
        if name is not None:
            engine = self.engines.get(name)
            if engine is None:
                known = ", ".join(sorted(self.engines)) or "none"
                raise ModelNotFound(f"no model named {name!r} (loaded: {known})")
            if task is not None and engine.task != task:
                raise BadRequest(f"model {name!r} serves {engine.task}, not {task}")
            return engine
        if task is None:
            if len(self.engines) == 1:
                return next(iter(self.engines.values()))
            known = ", ".join(sorted(self.engines)) or "none"
            raise BadRequest(f"{len(self.engines)} models are served ({known}): {unnamed}")
        serving = sorted(engine_name for engine_name, engine in self.engines.items() if engine.task == task)
        if len(serving) == 1:
            return self.engines[serving[0]]
        if not serving:
            raise BadRequest(f"no loaded model serves {task}")
        raise BadRequest(f"several models serve {task}; name one in 'model': {', '.join(serving)}")

    async def start_all(self) -> None:
        """Start and warm up every engine, one after another (each LoRA adapter after its base); readiness turns
        true when all are done. Not concurrently: each model's warm-up times a probe batch for admission's speed
        estimate, and probes sharing the cores would each measure their model slower than it runs alone."""
        for engine in sorted(self.engines.values(), key=lambda e: e.rate_of is not None):
            await engine.start()
        self.started = True
        logger.info("serving %d model(s): %s", len(self.engines), ", ".join(sorted(self.engines)))

    async def stop_all(self, drain: bool = True) -> None:
        self.shutting_down = True
        await asyncio.gather(*(engine.stop(drain=drain) for engine in self.engines.values()))


class Permits:
    """Inference requests in flight, over every transport: at most ``limit`` (``max_concurrent_requests``) at once;
    one more is refused at once (Overloaded, before any model work)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def refusal(self) -> Overloaded:
        return Overloaded(f"{self.limit} requests in flight already (max_concurrent_requests)")

    def take(self) -> None:
        if self.held >= self.limit:
            raise self.refusal()
        self.held += 1

    def give(self) -> None:
        self.held -= 1


def key_authorised(authorization: bytes, keys: Sequence[bytes]) -> bool:
    """Whether an ``Authorization`` value is ``Bearer KEY`` with one of ``keys``. Every key is compared, in constant
    time, whatever the outcome: the time taken tells nothing about the keys."""
    scheme, _, token = authorization.partition(b" ")
    matches = [hmac.compare_digest(token.strip(), key) for key in keys]
    return scheme.lower() == b"bearer" and any(matches)


T = TypeVar("T")

ClientGone = Callable[[], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    """One request in the task handler's types: ``inputs`` (one per result) and ``params``."""

    task: str
    inputs: list[Any]
    params: Any
    model: str | None = None  # None: the only loaded model serving ``task``
    # The parameters the request gave, asked only of a model with request defaults (None: all were given).
    explicit: Callable[[], frozenset[str]] | None = None
    timeout_s: float | None = None  # its own deadline (a gRPC call's), when shorter than the settings' timeout_s
    background: bool = False  # a batch job's line: its rows run when no online row waits, with no deadline

    @classmethod
    def of(cls, request: TaskRequest, timeout_s: float | None = None, background: bool = False) -> InferenceRequest:
        """A protocol's validated task request, in the handler's types."""
        inputs, params = request.to_task()
        return cls(request.task, inputs, params, request.model, request.given_fields, timeout_s, background)


@dataclass(frozen=True, slots=True)
class InferenceResult:
    model: str  # the engine that answered
    results: list[Any]  # one per input


async def run_inference(
    request: InferenceRequest,
    registry: ModelRegistry,
    settings: Settings,
    client_gone: ClientGone | None = None,
    engine: Engine | None = None,
) -> InferenceResult:
    """Select the engine (unless the protocol chose ``engine``: an OIP v2 path names it), enforce the task's input
    limit (its task unit's: ``max_inputs_per_request``, ``max_embedding_inputs``), infer (within the request's
    ``timeout_s`` when it has one); cancelled if ``client_gone`` returns first."""
    # No shutting_down check here: after SIGTERM uvicorn accepts no new connections, and a request already
    # sent on an open one is answered; the engines refuse work only once the lifespan stops them.
    if engine is None:
        engine = registry.select(request.task, request.model)
    unit = BY_TASK.get(request.task)
    setting = unit.max_inputs_setting if unit is not None else "max_inputs_per_request"
    count, limit = len(request.inputs), getattr(settings, setting)
    if count > limit:
        raise PayloadTooLarge(f"{count} inputs in one request; the limit is {limit} ({Settings.named(setting)})")
    params = engine.with_request_defaults(request.params, request.explicit)
    work = engine.infer(request.inputs, params, request.timeout_s, request.background)
    results = await (work if client_gone is None else until_disconnected(work, client_gone))
    return InferenceResult(engine.name, results)


async def until_disconnected(work: Awaitable[T], client_gone: ClientGone) -> T:
    """Await ``work``; if ``client_gone`` returns first, cancel it (its queued rows are then dropped)."""
    current = asyncio.current_task()
    assert current is not None
    disconnected: list[bool] = []

    async def cancel_when_gone(task: asyncio.Task[Any]) -> None:
        await client_gone()
        disconnected.append(True)
        task.cancel()

    watcher = asyncio.get_running_loop().create_task(cancel_when_gone(current))
    try:
        return await work
    except asyncio.CancelledError:
        if disconnected:
            current.uncancel()
            raise ClientClosedRequest("client disconnected before the answer was ready") from None
        raise
    finally:
        watcher.cancel()


logger = logging.getLogger(__name__)

# glibc keeps the heap a burst freed (thousands of connections, megabyte bodies): without handing it back now and
# then, RSS stays at the burst's high-water mark (benchmarks/results/hostile.md).
TRIM_EVERY_S = 15.0


class ServiceCore:
    """The served models and everything they run on; one per process, whatever the transports."""

    def __init__(
        self,
        settings: Settings,
        engines: Mapping[str, Engine] | None = None,
        broken: Mapping[str, str] | None = None,
    ) -> None:
        """``engines``: already loaded engines (else ``load`` reads ``settings``' models); ``broken``: bundles
        skipped when they were loaded (``skip_broken``), name -> reason."""
        self.settings = settings
        self.metrics = ServiceMetrics()
        self.executor = ThreadPoolExecutor(settings.prepare_threads, thread_name_prefix="bertserve-prepare")
        self.registry = ModelRegistry({})
        self.permits = Permits(settings.max_concurrent_requests)
        self.tracing = configure_tracing()  # None unless OTEL_* asks for traces and the SDK is installed
        # Triton's trace extension reads and changes these: OFF for good without a tracer
        self.trace_settings = self.tracing.settings if self.tracing is not None else TraceSettings(enabled=False)
        # Triton's system shared memory regions (both transports read inputs from and write outputs to them)
        self.shared_memory = SharedMemoryRegions(settings.allow_client_shm, settings.max_body_bytes)
        self._engines = dict(engines) if engines is not None else None
        self._broken = dict(broken or {})
        self._tasks: list[asyncio.Task[None]] = []
        self.loaded = False
        self.siblings: Siblings | None = None  # one serving process of several (service.processes): serve() sets it
        self.repository = ModelRepository(self)
        self.metrics.watch_ready(lambda: self.ready)

    @property
    def ready(self) -> bool:
        return self.registry.ready

    def load(self) -> None:
        """Load every bundle (blocking: call it from a thread inside an event loop) and build the registry. Raises
        BundleError naming a bad bundle (unless ``skip_broken``) and DeviceUnavailable when the device cannot be had."""
        if self._engines is None:
            record = self._broken if self.settings.skip_broken else None
            self._engines = load_engines(self.settings.model_sources(), self.settings, self.executor, record)
        for name, engine in self._engines.items():
            self.watch(name, engine)
        self.registry = ModelRegistry(self._engines, self._broken, self.settings.default_model)
        self.loaded = True

    def watch(self, name: str, engine: Engine) -> None:
        """The metrics of one engine: its batches, queue, device, shed work and batching choice."""
        if engine.lane.observer is None:
            engine.lane.observer = self.metrics.observer(name, engine.task)
        self.metrics.watch_queue(name, engine.task, functools.partial(getattr, engine.batcher, "queue_depth"))
        self.metrics.watch_engine(engine)
        self.metrics.record_batching(name, engine.task, engine.batching)

    async def start(self) -> None:
        """Load (in a thread) unless loaded, then start and warm up every engine in the background: ``ready`` turns
        True when all are warm; a failed start is logged and the core stays not ready."""
        if not self.loaded:
            await asyncio.to_thread(self.load)
        starting = asyncio.create_task(self.registry.start_all())
        starting.add_done_callback(_log_start_failure)
        self._tasks = [starting, asyncio.create_task(_trim_free_memory())]

    async def infer(self, request: InferenceRequest, client_gone: ClientGone | None = None) -> InferenceResult:
        """One request through the limits every transport shares (``service.core.run_inference``)."""
        return await run_inference(request, self.registry, self.settings, client_gone)

    async def stop(self, drain: bool = True) -> None:
        """Readiness off, then finish (``drain``) or fail what is queued and stop every worker."""
        self.registry.shutting_down = True
        for task in self._tasks:
            if not task.done():
                task.cancel()
        await self.registry.stop_all(drain=drain)
        self.shared_memory.close()
        self.executor.shutdown(wait=False)
        if self.tracing is not None:
            await asyncio.to_thread(self.tracing.shutdown)
        logger.info("stopped")


async def _trim_free_memory() -> None:
    while True:
        await asyncio.sleep(TRIM_EVERY_S)
        await asyncio.to_thread(release_free_memory)


def _log_start_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.critical("start-up failed; the service stays not ready", exc_info=task.exception())
